//! Archives in a local directory: the [`ArchiveStore`] of the local platform and benchmarks.

use std::path::PathBuf;

use tokio::io::AsyncWriteExt;

use crate::stores::{ArchiveStore, BoxRead, StoreError};

/// Archives in a local directory (`<dir>/<key>`), for the local platform and benchmarks.
pub struct DirectoryArchives {
    /// The directory holding the archives.
    pub dir: PathBuf,
}

impl DirectoryArchives {
    fn path(&self, key: &str) -> Result<PathBuf, StoreError> {
        let rel =
            super::safe_relative(std::path::Path::new(key)).map_err(|e| StoreError::Refused {
                service: "contexts directory",
                source: e.into(),
            })?;
        Ok(self.dir.join(rel))
    }
}

#[async_trait::async_trait]
impl ArchiveStore for DirectoryArchives {
    async fn open(&self, key: &str) -> Result<Option<BoxRead>, StoreError> {
        let path = self.path(key)?;
        match tokio::fs::File::open(&path).await {
            Ok(f) => Ok(Some(
                Box::pin(tokio::io::BufReader::with_capacity(256 * 1024, f)) as BoxRead,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Unavailable {
                service: "contexts directory",
                source: e.into(),
            }),
        }
    }

    async fn put(&self, key: &str, mut body: BoxRead) -> Result<u64, StoreError> {
        let io = |e: std::io::Error| StoreError::Other {
            service: "contexts directory",
            source: e.into(),
        };
        let path = self.path(key)?;
        let parent = path
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.clone());
        tokio::fs::create_dir_all(&parent).await.map_err(io)?;
        // Exclusively created under a random name, never through a link (the one helper every
        // file of the local platform's data directory is written with).
        let (tmp, f) = wallcrawler_local::private_fs::create_temp_beside(&path).map_err(io)?;
        let result = async {
            let mut f = tokio::fs::File::from_std(f);
            let n = tokio::io::copy(&mut body, &mut f).await.map_err(io)?;
            f.flush().await.map_err(io)?;
            f.sync_all().await.map_err(io)?;
            tokio::fs::rename(&tmp, &path).await.map_err(io)?;
            Ok(n)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use tokio::io::AsyncRead;

    use super::*;

    #[tokio::test]
    async fn directory_archives_replace_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryArchives {
            dir: dir.path().to_owned(),
        };
        assert!(store.open("p/c/profile.tar.gz").await.unwrap().is_none());
        store
            .put("p/c/profile.tar.gz", Box::pin(&b"first"[..]))
            .await
            .unwrap();
        // A failing body leaves the previous archive in place.
        struct Failing;
        impl AsyncRead for Failing {
            fn poll_read(
                self: Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                _: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Err(std::io::Error::other("interrupted")))
            }
        }
        assert!(
            store
                .put("p/c/profile.tar.gz", Box::pin(Failing))
                .await
                .is_err()
        );
        let mut r = store.open("p/c/profile.tar.gz").await.unwrap().unwrap();
        let mut s = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut r, &mut s)
            .await
            .unwrap();
        assert_eq!(s, "first");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("p/c")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no partial file left behind");
        assert!(store.open("../escape").await.is_err());
    }
}
