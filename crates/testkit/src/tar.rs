//! Archives with raw headers: the tar crate's safe builders refuse the hostile entries
//! (`..`, absolute paths, links out of the tree) the archive tests need.

use ::tar::{Builder, EntryType, Header};

/// Path, type, data and link target of an entry of [`raw_tar`].
pub type RawEntry<'a> = (&'a str, EntryType, &'a [u8], Option<&'a str>);

/// A tar of `entries`, their names and link targets written into the headers as given.
pub fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut b = Builder::new(Vec::new());
    for (path, kind, data, link) in entries {
        let mut h = Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        let gnu = h.as_gnu_mut().expect("a GNU header");
        gnu.name[..path.len()].copy_from_slice(path.as_bytes());
        if let Some(l) = link {
            gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_cksum();
        b.append(&h, *data).expect("append to a Vec");
    }
    b.into_inner().expect("finish a Vec")
}
