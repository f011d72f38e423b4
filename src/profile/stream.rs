//! The archive between a profile directory and its store, streamed both ways: the store's
//! bytes through gunzip and untar ([`super::unpack_gz`]) into a directory, and a directory
//! through tar and gzip ([`super::pack_gz`]) into the store, with the blocking halves on the
//! blocking pool and at most a few MiB in flight.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{ArchiveError, ArchiveLimits, UnpackStats};
use crate::stores::{ArchiveStore, BoxRead, StoreError, retry};

/// Why the profile could not be restored or saved.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Reading from or writing to the archive store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The archive was refused or could not be unpacked or packed.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// The blocking thread that packs or unpacks the archive panicked or was cancelled.
    #[error("the archive worker stopped")]
    Worker(#[source] tokio::task::JoinError),
}

impl ProfileError {
    /// What the session item says: the archive's own fault in full (names already shortened),
    /// a service's failure in a few words (the detail is for the task log).
    pub fn reason(&self) -> String {
        match self {
            Self::Archive(e) => e.to_string(),
            Self::Store(e) => format!("{} (see the task log)", e.summary()),
            Self::Worker(_) => "an internal error (see the task log)".to_owned(),
        }
    }
}

/// Streams the archive from the store through gunzip and untar into `dest`. `None` when the
/// store has no archive (a new context).
pub async fn hydrate(
    store: &dyn ArchiveStore,
    key: &str,
    dest: &Path,
    limits: ArchiveLimits,
    retry_for: Duration,
) -> Result<Option<UnpackStats>, ProfileError> {
    let Some(reader) = retry("fetching the profile archive", retry_for, || {
        store.open(key)
    })
    .await?
    else {
        return Ok(None);
    };
    let dest = dest.to_owned();
    let stats = tokio::task::spawn_blocking(move || {
        let sync = tokio_util::io::SyncIoBridge::new(reader);
        super::unpack_gz(
            std::io::BufReader::with_capacity(256 * 1024, sync),
            &dest,
            limits,
        )
    })
    .await
    .map_err(ProfileError::Worker)??;
    Ok(Some(stats))
}

/// A chunk of archive bytes from the packer, or how the packing ended.
enum Chunk {
    Data(Bytes),
    End,
    Failed(String),
}

/// `std::io::Write` for the blocking packer, sending chunks to the async uploader.
struct ChunkWriter {
    tx: mpsc::Sender<Chunk>,
    buf: Vec<u8>,
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 1 << 20 {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(1 << 20),
        ));
        self.tx
            .blocking_send(Chunk::Data(chunk))
            .map_err(|_| std::io::Error::other("the uploader stopped"))
    }
}

/// An `AsyncRead` over the packer's chunks that ends only after an explicit end marker, so a
/// packer that fails or dies can never look like a complete (truncated) archive.
fn chunk_reader(rx: mpsc::Receiver<Chunk>) -> BoxRead {
    let stream = futures_util::stream::unfold((rx, false), |(mut rx, done)| async move {
        if done {
            return None;
        }
        match rx.recv().await {
            Some(Chunk::Data(b)) => Some((Ok(b), (rx, false))),
            Some(Chunk::End) => None,
            Some(Chunk::Failed(e)) => Some((Err(std::io::Error::other(e)), (rx, true))),
            None => Some((
                Err(std::io::Error::other("the archive writer stopped early")),
                (rx, true),
            )),
        }
    });
    Box::pin(tokio_util::io::StreamReader::new(stream))
}

/// Packs `src` (plus `extra` root files) and stores it under `key`, streaming.
pub async fn persist_profile(
    store: Arc<dyn ArchiveStore>,
    key: &str,
    src: &Path,
    extra: Vec<(String, Vec<u8>)>,
) -> Result<u64, ProfileError> {
    let (tx, rx) = mpsc::channel::<Chunk>(8);
    let src: PathBuf = src.to_owned();
    let packer = tokio::task::spawn_blocking(move || {
        let refs: Vec<(&str, &[u8])> = extra
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let mut writer = ChunkWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(1 << 20),
        };
        let packed = super::pack_gz(&src, &mut writer, &refs).and_then(|(stats, w)| {
            std::io::Write::flush(w).map_err(|source| ArchiveError::Write {
                path: "<archive>".into(),
                source,
            })?;
            Ok(stats)
        });
        match &packed {
            Ok(_) => {
                let _ = tx.blocking_send(Chunk::End);
            }
            Err(e) => {
                let _ = tx.blocking_send(Chunk::Failed(e.to_string()));
            }
        }
        packed
    });
    let uploaded = store.put(key, chunk_reader(rx)).await;
    let packed = packer.await.map_err(ProfileError::Worker)?;
    packed?;
    Ok(uploaded?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::DirectoryArchives;
    use wallcrawler_contract::storage::SESSION_COOKIES_FILE;

    #[tokio::test]
    async fn persist_then_hydrate_through_a_directory_store() {
        let store: Arc<dyn ArchiveStore> = Arc::new(DirectoryArchives {
            dir: tempfile::tempdir().unwrap().keep(),
        });
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("Default")).unwrap();
        std::fs::write(src.path().join("Default/Cookies"), vec![42u8; 3 << 20]).unwrap();
        let n = persist_profile(
            store.clone(),
            "p/c/profile.tar.gz",
            src.path(),
            vec![(SESSION_COOKIES_FILE.into(), b"[]".to_vec())],
        )
        .await
        .unwrap();
        assert!(n > 0);
        let dest = tempfile::tempdir().unwrap();
        let limits = ArchiveLimits {
            max_bytes: 1 << 30,
            max_entries: 1000,
        };
        let stats = hydrate(
            store.as_ref(),
            "p/c/profile.tar.gz",
            dest.path(),
            limits,
            Duration::from_secs(1),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(stats.bytes, (3 << 20) + 2);
        assert_eq!(
            std::fs::read(dest.path().join("Default/Cookies")).unwrap(),
            vec![42u8; 3 << 20]
        );
        assert!(
            hydrate(
                store.as_ref(),
                "p/none/profile.tar.gz",
                dest.path(),
                limits,
                Duration::from_secs(1)
            )
            .await
            .unwrap()
            .is_none()
        );
    }

    #[tokio::test]
    async fn a_failing_packer_never_completes_an_upload() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ArchiveStore> = Arc::new(DirectoryArchives {
            dir: dir.path().to_owned(),
        });
        store.put("k", Box::pin(&b"previous"[..])).await.unwrap();
        let missing = dir.path().join("no-such-profile");
        assert!(
            persist_profile(store.clone(), "k", &missing, vec![])
                .await
                .is_err()
        );
        assert_eq!(std::fs::read(dir.path().join("k")).unwrap(), b"previous");
    }
}
