//! A zip of stored objects: the writer (entries stored uncompressed, bounded in size) and what a
//! store hands back (its bytes, or a URL to fetch it from). Pure: the stores and the downloads
//! endpoint use it.

use std::io::{Read, Seek, Write};

use crate::error::StoreError;

/// How long the presigned GET of a downloads zip is valid.
pub const ZIP_URL_TTL_SECONDS: u64 = 300;

/// A zip, as the store hands it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zip {
    /// Its bytes.
    Body(axum::body::Bytes),
    /// A URL it can be fetched from (a presigned GET).
    At(String),
}

/// Why a zip could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ZipFail {
    /// Reading an entry or writing the zip failed.
    #[error("reading or writing the zip failed")]
    Io(#[from] std::io::Error),
    /// The zip writer refused.
    #[error("the zip writer failed")]
    Zip(#[from] zip::result::ZipError),
    /// The entries hold more than the zip may.
    #[error("the session's downloads hold more than {0} bytes")]
    TooLarge(u64),
}

impl From<ZipFail> for StoreError {
    fn from(e: ZipFail) -> Self {
        StoreError::failed_by("making the downloads zip", e)
    }
}

/// Whether `name` (a key's rest under a `downloads/` prefix) is a stored download: one path
/// component, not a temporary file of a write in progress (a leading `.`).
pub fn is_entry_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains('/')
}

/// Writes `entries` (name, content) into a zip on `out`, stored uncompressed (downloads are
/// mostly compressed already), at most `max` bytes of content in all.
pub fn write_zip<W, R>(
    out: W,
    entries: impl IntoIterator<Item = std::io::Result<(String, R)>>,
    max: u64,
) -> Result<W, ZipFail>
where
    W: Write + Seek,
    R: Read,
{
    let mut zip = zip::ZipWriter::new(out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    let mut total = 0u64;
    for entry in entries {
        let (name, content) = entry?;
        zip.start_file(name, options)?;
        let left = max - total;
        let n = std::io::copy(&mut content.take(left + 1), &mut zip)?;
        if n > left {
            return Err(ZipFail::TooLarge(max));
        }
        total += n;
    }
    Ok(zip.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_their_names_and_bytes() {
        let entries = vec![
            Ok(("a-1.csv".to_owned(), &b"x,y\n"[..])),
            Ok(("b-2.bin".to_owned(), &[0u8, 1, 2][..])),
        ];
        let out = write_zip(std::io::Cursor::new(Vec::new()), entries, 100).unwrap();
        let mut z = zip::ZipArchive::new(std::io::Cursor::new(out.into_inner())).unwrap();
        assert_eq!(z.len(), 2);
        for (name, want) in [("a-1.csv", &b"x,y\n"[..]), ("b-2.bin", &[0u8, 1, 2][..])] {
            let mut got = Vec::new();
            z.by_name(name).unwrap().read_to_end(&mut got).unwrap();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn no_entries_make_an_empty_zip_and_too_much_is_refused() {
        let none: Vec<std::io::Result<(String, &[u8])>> = vec![];
        let out = write_zip(std::io::Cursor::new(Vec::new()), none, 10).unwrap();
        assert_eq!(out.into_inner().len(), 22);
        let big = vec![Ok(("a".to_owned(), &[0u8; 11][..]))];
        let e = write_zip(std::io::Cursor::new(Vec::new()), big, 10).unwrap_err();
        assert!(matches!(e, ZipFail::TooLarge(10)));
    }

    #[test]
    fn only_single_component_names_are_entries() {
        assert!(is_entry_name("report-1.csv"));
        for bad in ["", ".report.partial-1", "a/b", ".."] {
            assert!(!is_entry_name(bad), "{bad}");
        }
    }
}
