//! TLS for the connect gateway: a rustls server whose certificate is read from PEM files and
//! read again when they change (a renewed certificate needs no restart), and the local
//! platform's certificate authority.
//!
//! - [`ReloadingCert`] answers every handshake with the certificate it last loaded. Its files
//!   are looked at (size and modification time, one `stat` each) every [`RELOAD_EVERY`]; a
//!   changed pair is loaded whole and checked (the key must match the certificate) before it
//!   replaces the old one, so a half-written or mismatched renewal keeps the previous
//!   certificate serving and is logged. Polling rather than inotify: it sees atomic renames,
//!   symlink swaps (Kubernetes/ECS secret mounts) and files on any file system alike, for one
//!   `stat` pair a period.
//! - [`server_config`] builds the rustls configuration on aws-lc-rs, the provider the AWS SDK
//!   already builds: TLS 1.2 and 1.3, ALPN `http/1.1` (WebSocket upgrades are HTTP/1.1).
//! - [`LocalCa::ensure`] makes, on first use, a certificate authority and a certificate for
//!   `127.0.0.1`, `::1` and `localhost` signed by it in a directory (files 0600), and reuses them
//!   afterwards, so a Node client needs only `NODE_EXTRA_CA_CERTS=<ca.pem>`.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::crypto::{CryptoProvider, aws_lc_rs};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{self, ServerConfig};
use tokio_util::sync::CancellationToken;

/// How often the certificate files are looked at for a change.
pub const RELOAD_EVERY: Duration = Duration::from_secs(30);

/// A failure to load, check or make a certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or its metadata not taken.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The PEM file holds no certificate, or one that does not parse.
    #[error("{path}: no certificate could be read ({source})")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The PEM file holds no private key (PKCS#8, PKCS#1 or SEC1), or one that does not parse.
    #[error("{path}: no private key could be read ({source})")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The key is of a kind rustls cannot sign with, or does not belong to the certificate.
    #[error("the certificate and the key do not make a usable pair: {0}")]
    Pair(#[source] rustls::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[source] rustls::Error),
    /// rcgen could not make a certificate.
    #[error("making the local certificate: {0}")]
    Generate(#[source] rcgen::Error),
}

/// Where a certificate chain and its key are kept, as PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The leaf's private key.
    pub key: PathBuf,
}

/// What a file looked like when it was loaded: a change in either means "load again".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    inode: u64,
}

fn stamp(path: &Path) -> Result<Stamp, TlsError> {
    // `metadata` follows symlinks: a swapped link target is a change.
    let m = fs::metadata(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(Stamp {
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        inode: m.ino(),
    })
}

struct Loaded {
    key: Arc<CertifiedKey>,
    stamps: [Stamp; 2],
}

/// The certificate the gateway presents, read again from its files when they change.
pub struct ReloadingCert {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Loaded>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    /// Loads the pair; an unusable pair is an error (the gateway does not start without one).
    pub fn load(files: CertFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let loaded = load_pair(&files, &provider)?;
        Ok(Self {
            files,
            provider,
            current: RwLock::new(loaded),
        })
    }

    /// Loads the files again when either changed since the last load. `Ok(true)`: a new
    /// certificate serves from the next handshake on; `Ok(false)`: nothing changed; `Err`: the
    /// new files are unusable and the previous certificate keeps serving.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = [stamp(&self.files.cert)?, stamp(&self.files.key)?];
        if now == self.read().stamps {
            return Ok(false);
        }
        let loaded = load_pair(&self.files, &self.provider)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(true)
    }

    /// Looks at the files every `every` until `cancel`, logging each reload and each refused one.
    pub async fn watch(self: Arc<Self>, every: Duration, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate: the files were just loaded
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.reload_if_changed() {
                Ok(true) => {
                    tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded")
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    error = %e,
                    "TLS certificate files changed but could not be used; the previous certificate keeps serving"
                ),
            }
        }
    }

    /// The certificate chain serving now (leaf first).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.read().key.cert.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.read().key.clone())
    }
}

fn load_pair(files: &CertFiles, provider: &CryptoProvider) -> Result<Loaded, TlsError> {
    // Stamps first: a write landing between the stamp and the read is seen again next period.
    let stamps = [stamp(&files.cert)?, stamp(&files.key)?];
    let read = |path: &Path| {
        fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read(&files.cert)?;
    let key_pem = read(&files.key)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .and_then(|c| {
            if c.is_empty() {
                Err(rustls::pki_types::pem::Error::NoItemsFound)
            } else {
                Ok(c)
            }
        })
        .map_err(|source| TlsError::Certificate {
            path: files.cert.clone(),
            source,
        })?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| TlsError::Key {
        path: files.key.clone(),
        source,
    })?;
    let key = CertifiedKey::from_der(chain, key, provider).map_err(TlsError::Pair)?;
    Ok(Loaded {
        key: Arc::new(key),
        stamps,
    })
}

/// The gateway's rustls configuration: TLS 1.2 and 1.3 on aws-lc-rs, no client certificates,
/// ALPN `http/1.1`, the certificate from `cert`.
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(cert.provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The local platform's certificate authority and the loopback certificate it signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCa {
    /// The authority's certificate: what a client trusts (`NODE_EXTRA_CA_CERTS`).
    pub ca_cert: PathBuf,
    /// The server's certificate (for `127.0.0.1`, `::1` and `localhost`) and key.
    pub server: CertFiles,
}

impl LocalCa {
    /// The files in `dir` (`ca.pem`, `ca-key.pem`, `cert.pem`, `key.pem`), made on first use.
    /// Existing files are reused as they are; if only some exist, all four are made again (a
    /// certificate without its authority, or the reverse, is of no use).
    pub fn ensure(dir: &Path) -> Result<Self, TlsError> {
        let ca = Self {
            ca_cert: dir.join("ca.pem"),
            server: CertFiles {
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
            },
        };
        let ca_key = dir.join("ca-key.pem");
        let all = [&ca.ca_cert, &ca_key, &ca.server.cert, &ca.server.key];
        if all.iter().all(|p| p.is_file()) {
            return Ok(ca);
        }
        fs::create_dir_all(dir).map_err(|source| TlsError::Write {
            path: dir.to_owned(),
            source,
        })?;
        let made = make_local_ca().map_err(TlsError::Generate)?;
        // The server's files last: `ensure` treats a partial set as absent, so a crash midway
        // leaves nothing half made that is ever used.
        for (path, pem) in [
            (&ca.ca_cert, &made.ca_cert),
            (&ca_key, &made.ca_key),
            (&ca.server.key, &made.key),
            (&ca.server.cert, &made.cert),
        ] {
            write_private(path, pem.as_bytes())?;
        }
        Ok(ca)
    }
}

struct MadeCa {
    ca_cert: String,
    ca_key: String,
    cert: String,
    key: String,
}

fn make_local_ca() -> Result<MadeCa, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Wallcrawler local CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, &ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
        "localhost".to_owned(),
    ])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "Wallcrawler local gateway");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(MadeCa {
        ca_cert: ca_cert.pem(),
        ca_key: ca_key.serialize_pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Writes `bytes` to `path` as a new 0600 file (replacing an old one), whatever the umask,
/// never through a link ([`wallcrawler_contract::private_fs::write_atomic`]).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    wallcrawler_contract::private_fs::write_atomic(path, bytes).map_err(|source| TlsError::Write {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn pair(dir: &Path, name: &str) -> (CertFiles, CertificateDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = CertFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        write_private(&files.cert, cert.pem().as_bytes()).unwrap();
        write_private(&files.key, key.serialize_pem().as_bytes()).unwrap();
        (files, cert.der().clone())
    }

    #[test]
    fn a_changed_pair_serves_from_the_next_handshake_and_a_broken_one_never_does() {
        let dir = tempfile::tempdir().unwrap();
        let (files, first) = pair(dir.path(), "a.test");
        let cert = ReloadingCert::load(files.clone()).unwrap();
        assert_eq!(cert.chain(), vec![first.clone()]);
        assert!(!cert.reload_if_changed().unwrap(), "nothing changed");

        let (_, second) = pair(dir.path(), "b.test");
        assert!(cert.reload_if_changed().unwrap());
        assert_eq!(cert.chain(), vec![second.clone()]);

        // A certificate whose key is another's: refused, the previous pair keeps serving.
        let other = KeyPair::generate().unwrap();
        write_private(&files.key, other.serialize_pem().as_bytes()).unwrap();
        assert!(matches!(cert.reload_if_changed(), Err(TlsError::Pair(_))));
        assert_eq!(cert.chain(), vec![second.clone()]);
        // Half-written (empty) certificate file: refused too.
        write_private(&files.cert, b"").unwrap();
        assert!(matches!(
            cert.reload_if_changed(),
            Err(TlsError::Certificate { .. })
        ));
        assert_eq!(cert.chain(), vec![second]);
    }

    #[test]
    fn missing_or_garbage_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let files = CertFiles {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("nope-key.pem"),
        };
        let e = ReloadingCert::load(files.clone()).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        assert!(e.to_string().contains("nope.pem"), "{e}");

        let (files, _) = pair(dir.path(), "a.test");
        write_private(
            &files.key,
            b"-----BEGIN NOTHING-----\n-----END NOTHING-----\n",
        )
        .unwrap();
        let e = ReloadingCert::load(files).unwrap_err();
        assert!(matches!(e, TlsError::Key { .. }), "{e}");
    }

    #[test]
    fn the_local_ca_is_made_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let ca = LocalCa::ensure(&tls).unwrap();
        for p in [
            &ca.ca_cert,
            &ca.server.cert,
            &ca.server.key,
            &tls.join("ca-key.pem"),
        ] {
            let mode = fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
        let first = fs::read(&ca.server.cert).unwrap();
        assert_eq!(LocalCa::ensure(&tls).unwrap(), ca);
        assert_eq!(
            fs::read(&ca.server.cert).unwrap(),
            first,
            "reused, not remade"
        );
        // The server certificate loads, and its key is its own.
        ReloadingCert::load(ca.server.clone()).unwrap();

        // A partial set is made again whole.
        fs::remove_file(tls.join("ca-key.pem")).unwrap();
        LocalCa::ensure(&tls).unwrap();
        assert_ne!(fs::read(&ca.server.cert).unwrap(), first);
    }

    #[tokio::test]
    async fn a_client_trusting_the_local_ca_completes_a_handshake_for_127_0_0_1_and_localhost() {
        use rustls::pki_types::ServerName;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let dir = tempfile::tempdir().unwrap();
        let ca = LocalCa::ensure(dir.path()).unwrap();
        let cert = Arc::new(ReloadingCert::load(ca.server.clone()).unwrap());
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(cert).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (tcp, _) = listener.accept().await.unwrap();
                let mut tls = acceptor.accept(tcp).await.unwrap();
                let mut b = [0u8; 4];
                tls.read_exact(&mut b).await.unwrap();
                tls.write_all(&b).await.unwrap();
                tls.shutdown().await.unwrap();
            }
        });

        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&ca.ca_cert).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let config =
            rustls::ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        for name in ["127.0.0.1", "localhost"] {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let server_name = ServerName::try_from(name.to_owned()).unwrap();
            let mut tls = connector.connect(server_name, tcp).await.unwrap();
            tls.write_all(b"ping").await.unwrap();
            let mut b = [0u8; 4];
            tls.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"ping", "{name}");
        }
        server.await.unwrap();
    }
}
