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
//! - [`LocalCa::ensure`] makes a certificate authority and a certificate for `127.0.0.1`, `::1`
//!   and `localhost` signed by it in a directory (files 0600), so a Node client needs only
//!   `NODE_EXTRA_CA_CERTS=<ca.pem>`. A client trusting that CA trusts whatever it signs, so it
//!   signs as little as it can: it is name-constrained to those three names (RFC 5280 name
//!   constraints: a certificate it signed for any other name does not verify), it is valid for
//!   [`LOCAL_CA_VALIDITY`] (made again on the start that finds less than
//!   [`LOCAL_CA_RENEW_BEFORE`] left, or other names), and its private key is never written:
//!   the one certificate it signs is signed when it is made, and nothing re-signs later (a new
//!   certificate comes with a new CA), so the key is dropped with the signing.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DnType, GeneralSubtree, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, NameConstraints,
};
use rustls::crypto::{CryptoProvider, aws_lc_rs};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{self, ServerConfig};
use tokio_util::sync::CancellationToken;

/// How often the certificate files are looked at for a change.
pub const RELOAD_EVERY: Duration = Duration::from_secs(30);

/// How long the local CA and the certificate it signs are valid.
pub const LOCAL_CA_VALIDITY: Duration = Duration::from_secs(30 * 24 * 3600);
/// A start that finds less than this left on the local CA makes a new one.
pub const LOCAL_CA_RENEW_BEFORE: Duration = Duration::from_secs(10 * 24 * 3600);
/// How far before its making the local CA is valid from: a client whose clock is a little
/// behind still accepts it.
const LOCAL_CA_BACKDATE: Duration = Duration::from_secs(3600);
/// The names the local gateway's certificate carries, and the only ones its CA may sign for.
pub const LOCAL_NAMES: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

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

/// What a made set records beside its files (`local-ca.json`): the names and the end of its
/// validity, read on the next start to decide whether to make it again.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LocalCaRecord {
    names: Vec<String>,
    /// Seconds since the Unix epoch.
    not_after: u64,
}

impl LocalCa {
    /// The files in `dir` (`ca.pem`, `cert.pem`, `key.pem` and the record `local-ca.json`),
    /// made when missing, when the CA has less than [`LOCAL_CA_RENEW_BEFORE`] left, when its
    /// names are not [`LOCAL_NAMES`], or when the certificate does not verify under the CA;
    /// otherwise reused. A `ca-key.pem` (where an earlier version kept the CA's key, with a CA
    /// valid until 4096 and no name constraints) means the set is made again, and it is
    /// removed. A client trusting the old `ca.pem` must be restarted with the new one.
    pub fn ensure(dir: &Path) -> Result<Self, TlsError> {
        Self::ensure_at(dir, SystemTime::now())
    }

    fn ensure_at(dir: &Path, now: SystemTime) -> Result<Self, TlsError> {
        let ca = Self {
            ca_cert: dir.join("ca.pem"),
            server: CertFiles {
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
            },
        };
        let old_key = dir.join("ca-key.pem");
        let record = dir.join("local-ca.json");
        if !old_key.exists() && ca.still_good(&record, now) {
            return Ok(ca);
        }
        fs::create_dir_all(dir).map_err(|source| TlsError::Write {
            path: dir.to_owned(),
            source,
        })?;
        let made = make_local_ca(now).map_err(TlsError::Generate)?;
        // The record last: a set without a matching one is made again, so a crash midway
        // leaves nothing half made that is ever used.
        for (path, pem) in [
            (&ca.ca_cert, &made.ca_cert),
            (&ca.server.key, &made.key),
            (&ca.server.cert, &made.cert),
        ] {
            write_private(path, pem.as_bytes())?;
        }
        let rec = LocalCaRecord {
            names: LOCAL_NAMES.iter().map(|n| (*n).to_owned()).collect(),
            not_after: made.not_after,
        };
        let rec = serde_json::to_vec_pretty(&rec).expect("the record serializes");
        write_private(&record, &rec)?;
        match fs::remove_file(&old_key) {
            Ok(()) => {
                tracing::info!(path = %old_key.display(), "removed the previous local CA's key")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(TlsError::Write {
                    path: old_key,
                    source,
                });
            }
        }
        tracing::info!(ca = %ca.ca_cert.display(), not_after = made.not_after, "made the local CA and its certificate");
        Ok(ca)
    }

    /// Whether the set in place may serve on: its record names [`LOCAL_NAMES`] and ends more
    /// than [`LOCAL_CA_RENEW_BEFORE`] after `now`, and its certificate verifies under its CA
    /// for each name at `now` (a set whose files were replaced one by one does not).
    fn still_good(&self, record: &Path, now: SystemTime) -> bool {
        let Some(rec) = fs::read(record)
            .ok()
            .and_then(|b| serde_json::from_slice::<LocalCaRecord>(&b).ok())
        else {
            return false;
        };
        let renew_at = now
            .checked_add(LOCAL_CA_RENEW_BEFORE)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(u64::MAX, |d| d.as_secs());
        if rec.names != LOCAL_NAMES || rec.not_after <= renew_at {
            return false;
        }
        let read_one = |path: &Path| {
            CertificateDer::pem_file_iter(path)
                .ok()
                .and_then(|mut certs| certs.next())
                .and_then(Result::ok)
        };
        let (Some(ca), Some(leaf)) = (read_one(&self.ca_cert), read_one(&self.server.cert)) else {
            return false;
        };
        self.server.key.is_file()
            && LOCAL_NAMES
                .iter()
                .all(|name| verify_under(&ca, &leaf, name, now).is_ok())
    }
}

/// Verifies `leaf` for `name` at `at` with `ca` as the only trust anchor, as a rustls client
/// does (webpki: signature, validity, name constraints, server-auth usage).
pub fn verify_under(
    ca: &CertificateDer<'_>,
    leaf: &CertificateDer<'_>,
    name: &str,
    at: SystemTime,
) -> Result<(), rustls::Error> {
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::{ServerName, UnixTime};

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone().into_owned())?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(aws_lc_rs::default_provider()),
    )
    .build()
    .map_err(|e| rustls::Error::General(e.to_string()))?;
    let name =
        ServerName::try_from(name.to_owned()).map_err(|e| rustls::Error::General(e.to_string()))?;
    let at = UnixTime::since_unix_epoch(
        at.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    verifier
        .verify_server_cert(leaf, &[], &name, &[], at)
        .map(|_| ())
}

struct MadeCa {
    ca_cert: String,
    cert: String,
    key: String,
    /// The end of both certificates' validity, seconds since the Unix epoch.
    not_after: u64,
}

/// The local CA's parameters at `now`: valid from [`LOCAL_CA_BACKDATE`] before `now` for
/// [`LOCAL_CA_VALIDITY`], a CA for end-entity certificates only (path length 0), permitted to
/// sign for [`LOCAL_NAMES`] alone (the DNS name `localhost`, which also covers its
/// subdomains, and the single addresses 127.0.0.1 and ::1).
fn local_ca_params(now: SystemTime) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params
        .distinguished_name
        .push(DnType::CommonName, "Wallcrawler local CA");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut permitted = Vec::new();
    for name in LOCAL_NAMES {
        permitted.push(match name.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(ip)) => {
                GeneralSubtree::IpAddress(CidrSubnet::V4(ip.octets(), [0xff; 4]))
            }
            Ok(std::net::IpAddr::V6(ip)) => {
                GeneralSubtree::IpAddress(CidrSubnet::V6(ip.octets(), [0xff; 16]))
            }
            Err(_) => GeneralSubtree::DnsName(name.to_owned()),
        });
    }
    params.name_constraints = Some(NameConstraints {
        permitted_subtrees: permitted,
        excluded_subtrees: Vec::new(),
    });
    set_validity(&mut params, now);
    Ok(params)
}

/// The validity of the local CA and its certificate made at `now`.
fn set_validity(params: &mut CertificateParams, now: SystemTime) {
    let since_epoch = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + since_epoch.saturating_sub(LOCAL_CA_BACKDATE);
    params.not_after = epoch + since_epoch + LOCAL_CA_VALIDITY;
}

/// A new CA and the gateway's certificate signed by it, valid from `now`. The CA's key lives
/// only in this function: nothing signs with it after this, so it is never written.
fn make_local_ca(now: SystemTime) -> Result<MadeCa, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let ca_params = local_ca_params(now)?;
    let not_after = u64::try_from(ca_params.not_after.unix_timestamp()).unwrap_or(0);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, &ca_key);
    let (cert, key) = local_leaf(&issuer, &LOCAL_NAMES, now)?;
    Ok(MadeCa {
        ca_cert: ca_cert.pem(),
        cert,
        key,
        not_after,
    })
}

/// A server certificate for `names` signed by `issuer`, valid as the CA is; its PEM and its
/// key's.
fn local_leaf(
    issuer: &Issuer<'_, impl rcgen::SigningKey>,
    names: &[&str],
    now: SystemTime,
) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "Wallcrawler local gateway");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    set_validity(&mut params, now);
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes `bytes` to `path` as a new 0600 file (replacing an old one), whatever the umask,
/// never through a link ([`wallcrawler_local::private_fs::write_atomic`]).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    wallcrawler_local::private_fs::write_atomic(path, bytes).map_err(|source| TlsError::Write {
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

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn first_cert(path: &Path) -> CertificateDer<'static> {
        CertificateDer::pem_file_iter(path)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
    }

    /// The `notBefore` and `notAfter` of a DER certificate, in seconds since the epoch (a few
    /// lines of DER rather than a parser crate for one field).
    fn validity(der: &[u8]) -> (i64, i64) {
        // (tag, content, rest) of the DER element at the start of `b` (lengths below 64 KiB).
        fn element(b: &[u8]) -> (u8, &[u8], &[u8]) {
            let (len, head) = match b[1] {
                n if n < 0x80 => (usize::from(n), 2),
                0x81 => (usize::from(b[2]), 3),
                0x82 => ((usize::from(b[2]) << 8) | usize::from(b[3]), 4),
                n => panic!("length form {n:#x}"),
            };
            (b[0], &b[head..head + len], &b[head + len..])
        }
        fn seconds(tag: u8, t: &[u8]) -> i64 {
            let t = std::str::from_utf8(t).unwrap();
            let (y, rest) = match tag {
                0x17 => {
                    let y: i64 = t[..2].parse().unwrap();
                    (if y < 50 { 2000 + y } else { 1900 + y }, &t[2..])
                }
                0x18 => (t[..4].parse().unwrap(), &t[4..]),
                _ => panic!("time tag {tag:#x}"),
            };
            let n = |i: usize| rest[i..i + 2].parse::<i64>().unwrap();
            let (m, d) = (n(0), n(2));
            // Days from the civil date (Howard Hinnant's algorithm).
            let y = if m <= 2 { y - 1 } else { y };
            let era = y.div_euclid(400);
            let yoe = y - era * 400;
            let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
            let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
            days * 86_400 + n(4) * 3600 + n(6) * 60 + n(8)
        }
        let (_, cert, _) = element(der);
        let (_, tbs, _) = element(cert);
        let mut rest = tbs;
        if rest[0] == 0xa0 {
            rest = element(rest).2; // version
        }
        for _ in 0..3 {
            rest = element(rest).2; // serial, signature algorithm, issuer
        }
        let (_, validity, _) = element(rest);
        let (t1, a, rest) = element(validity);
        let (t2, b, _) = element(rest);
        (seconds(t1, a), seconds(t2, b))
    }

    /// The DER of the NameConstraints extension's OID (2.5.29.30).
    const NAME_CONSTRAINTS_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x1e];

    #[test]
    fn the_local_ca_is_short_lived_name_constrained_and_its_key_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let ca = LocalCa::ensure(&tls).unwrap();
        let mut names: Vec<String> = fs::read_dir(&tls)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["ca.pem", "cert.pem", "key.pem", "local-ca.json"],
            "no CA key on disk"
        );
        for n in &names {
            let mode = fs::metadata(tls.join(n)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{n}");
        }
        // The CA's own key is nowhere in the directory: only the server's key is.
        let key_pem = fs::read_to_string(&ca.server.key).unwrap();
        assert_eq!(key_pem.matches("PRIVATE KEY-----").count(), 2, "one key");
        for n in ["ca.pem", "cert.pem", "local-ca.json"] {
            let text = fs::read_to_string(tls.join(n)).unwrap();
            assert!(!text.contains("PRIVATE KEY"), "{n}");
        }

        let ca_der = first_cert(&ca.ca_cert);
        let leaf = first_cert(&ca.server.cert);
        assert!(
            ca_der.windows(5).any(|w| w == NAME_CONSTRAINTS_OID),
            "the CA carries name constraints"
        );
        let now = SystemTime::now();
        let now_s = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let (from, until) = validity(&ca_der);
        assert!(
            (now_s - 2 * 3600..now_s).contains(&from),
            "valid from an hour ago: {from} vs {now_s}"
        );
        assert_eq!(
            until - from,
            (LOCAL_CA_VALIDITY + LOCAL_CA_BACKDATE).as_secs() as i64
        );
        assert!(until - now_s <= 31 * 86_400, "weeks, not centuries");
        assert_eq!(validity(&leaf).1, until, "the certificate ends with its CA");
        for name in LOCAL_NAMES {
            verify_under(&ca_der, &leaf, name, now).unwrap();
        }
        assert!(
            verify_under(&ca_der, &leaf, "localhost", now + LOCAL_CA_VALIDITY + DAY).is_err(),
            "expired after its validity"
        );
    }

    #[test]
    fn a_certificate_the_local_ca_signs_for_another_name_does_not_verify() {
        let now = SystemTime::now();
        let ca_key = KeyPair::generate().unwrap();
        let params = local_ca_params(now).unwrap();
        let ca_der = params.self_signed(&ca_key).unwrap().der().clone();
        let issuer = Issuer::new(params, &ca_key);
        let leaf = |names: &[&str]| {
            let (pem, _) = local_leaf(&issuer, names, now).unwrap();
            CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
        };
        // Its own names verify; another name, an address or a name beside its own does not,
        // even though the leaf carries that name (webpki's name-constraint processing).
        verify_under(&ca_der, &leaf(&["localhost"]), "localhost", now).unwrap();
        verify_under(&ca_der, &leaf(&["127.0.0.1"]), "127.0.0.1", now).unwrap();
        for (names, name) in [
            (&["bank.example"][..], "bank.example"),
            (&["10.0.0.1"][..], "10.0.0.1"),
            (&["127.0.0.2"][..], "127.0.0.2"),
            (&["::2"][..], "::2"),
            (&["localhost", "bank.example"][..], "localhost"),
        ] {
            let e = verify_under(&ca_der, &leaf(names), name, now).unwrap_err();
            assert!(
                format!("{e:?}").contains("NameConstraint"),
                "{names:?} as {name}: {e:?}"
            );
        }
    }

    #[test]
    fn the_local_ca_is_reused_until_near_its_end_and_an_old_one_with_a_key_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let t0 = SystemTime::now();
        let ca = LocalCa::ensure_at(&tls, t0).unwrap();
        let first = fs::read(&ca.ca_cert).unwrap();
        assert_eq!(LocalCa::ensure_at(&tls, t0 + DAY).unwrap(), ca);
        assert_eq!(fs::read(&ca.ca_cert).unwrap(), first, "reused, not remade");
        ReloadingCert::load(ca.server.clone()).unwrap();

        // Within the renewal margin of its end: made again.
        let late = t0 + LOCAL_CA_VALIDITY - LOCAL_CA_RENEW_BEFORE + DAY;
        LocalCa::ensure_at(&tls, late).unwrap();
        let second = fs::read(&ca.ca_cert).unwrap();
        assert_ne!(second, first, "renewed");
        let (from, _) = validity(&first_cert(&ca.ca_cert));
        let late_s = late
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!((late_s - 2 * 3600..late_s).contains(&from));

        // Other names in the record (what an older or newer version served): made again.
        let record = tls.join("local-ca.json");
        let mut rec: serde_json::Value =
            serde_json::from_slice(&fs::read(&record).unwrap()).unwrap();
        rec["names"] = serde_json::json!(["localhost"]);
        write_private(&record, rec.to_string().as_bytes()).unwrap();
        LocalCa::ensure_at(&tls, late).unwrap();
        let third = fs::read(&ca.ca_cert).unwrap();
        assert_ne!(third, second, "made again for its names");

        // A certificate from elsewhere beside the CA: made again.
        let other = tempfile::tempdir().unwrap();
        let other = LocalCa::ensure(other.path()).unwrap();
        fs::copy(&other.server.cert, &ca.server.cert).unwrap();
        LocalCa::ensure_at(&tls, late).unwrap();
        assert_ne!(fs::read(&ca.ca_cert).unwrap(), third);

        // The earlier layout (a `ca-key.pem`): made again, the key removed.
        write_private(&tls.join("ca-key.pem"), b"old").unwrap();
        let before = fs::read(&ca.ca_cert).unwrap();
        LocalCa::ensure_at(&tls, late).unwrap();
        assert!(!tls.join("ca-key.pem").exists());
        assert_ne!(fs::read(&ca.ca_cert).unwrap(), before);
        // A partial set: made again whole.
        fs::remove_file(&ca.server.key).unwrap();
        LocalCa::ensure_at(&tls, late).unwrap();
        assert!(ca.server.key.is_file());
        ReloadingCert::load(ca.server.clone()).unwrap();
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
