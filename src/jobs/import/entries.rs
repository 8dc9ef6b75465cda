//! An archive's entries as an import reads them (SPEC §2.7): every byte the
//! decoder gives counted against the archive's expansion bound, and the
//! extension headers (PAX records, GNU long names) read by this module, each
//! bounded, instead of whole by the tar reader — so that no archive can make
//! memoryd hold more than a small buffer, whatever it declares.

use super::{ImportError, invalid};
use crate::domain::portability::{MAX_ENTRIES, MAX_EXPANSION};
use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::rc::Rc;
use tar::EntryType;

/// An extension header (a long name, a PAX record list) larger than this is refused.
pub(super) const MAX_EXTENSION_BYTES: u64 = 64 << 10;
/// The decoder may give at least this much, however small the archive.
const MIN_EXPANSION_BYTES: u64 = 16 << 20;
/// What each entry adds to the bound: its header and padding, which
/// compress far better than 10 to 1 and are not what the bound is about.
const FRAMING_BYTES: u64 = 1024;

pub(super) const EXPANDED: &str = "the archive expands past 10 times its compressed size";
const _: () = assert!(MAX_EXPANSION == 10, "EXPANDED names the bound");

/// Reads through `inner`, failing once more bytes came out than `left` allows.
pub(super) struct Bounded<R> {
    inner: R,
    left: Rc<Cell<u64>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let left = self.left.get().checked_sub(n as u64);
        self.left.set(left.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, EXPANDED))?);
        Ok(n)
    }
}

type Decoded = Bounded<flate2::read::GzDecoder<BufReader<File>>>;

/// An archive being read: the tar, and what its decoder may still give.
pub(super) struct Archive {
    tar: tar::Archive<Decoded>,
    left: Rc<Cell<u64>>,
}

/// The archive at `path` as a tar over its bounded, decompressed bytes.
pub(super) fn open(path: &Path) -> io::Result<Archive> {
    let compressed = std::fs::metadata(path)?.len();
    let left = Rc::new(Cell::new(compressed.saturating_mul(MAX_EXPANSION).max(MIN_EXPANSION_BYTES)));
    let decoded = flate2::read::GzDecoder::new(BufReader::new(File::open(path)?));
    Ok(Archive { tar: tar::Archive::new(Bounded { inner: decoded, left: left.clone() }), left })
}

/// A tar error as the import's refusal.
pub(super) fn unreadable(e: io::Error) -> ImportError {
    if e.to_string().contains(EXPANDED) || e.get_ref().is_some_and(|inner| inner.to_string().contains(EXPANDED)) {
        return invalid(EXPANDED);
    }
    invalid(format!("not a tar archive ({e})"))
}

/// An entry with its name (a long name or a PAX `path` applied).
pub(super) type Named<'a> = (Vec<u8>, tar::Entry<'a, Decoded>);

/// The archive's entries with their names, extension headers checked and
/// consumed here; every entry, extensions too, counted against the limit.
pub(super) fn checked(
    archive: &mut Archive,
) -> Result<impl Iterator<Item = Result<Named<'_>, ImportError>> + '_, ImportError> {
    let left = archive.left.clone();
    let mut raw = archive.tar.entries().map_err(unreadable)?.raw(true);
    let (mut name, mut count): (Option<Vec<u8>>, u64) = (None, 0);
    Ok(std::iter::from_fn(move || {
        loop {
            let mut entry = match raw.next()? {
                Ok(entry) => entry,
                Err(e) => return Some(Err(unreadable(e))),
            };
            count += 1;
            left.set(left.get().saturating_add(FRAMING_BYTES));
            if count > MAX_ENTRIES {
                return Some(Err(invalid(format!("more than {MAX_ENTRIES} entries"))));
            }
            let kind = entry.header().entry_type();
            if !matches!(
                kind,
                EntryType::GNULongName | EntryType::GNULongLink | EntryType::XHeader | EntryType::XGlobalHeader
            ) {
                let path = name.take().unwrap_or_else(|| entry.path_bytes().into_owned());
                return Some(Ok((path, entry)));
            }
            match extension(&mut entry, kind) {
                Ok(Some(long)) => name = Some(long),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }))
}

/// An extension header's name for the next entry, if it gives one; too
/// large, unreadable, or one that changes a size: refused.
fn extension<R: Read>(entry: &mut tar::Entry<'_, R>, kind: EntryType) -> Result<Option<Vec<u8>>, ImportError> {
    let size = entry.header().size().map_err(unreadable)?;
    if size > MAX_EXTENSION_BYTES {
        return Err(invalid(format!(
            "an extension header (a long name or PAX records) of {size} bytes; at most {MAX_EXTENSION_BYTES}"
        )));
    }
    let mut data = Vec::with_capacity(size as usize);
    entry.read_to_end(&mut data).map_err(unreadable)?;
    match kind {
        EntryType::GNULongName => {
            let end = data.iter().position(|b| *b == 0).unwrap_or(data.len());
            Ok(Some(data[..end].to_vec()))
        }
        EntryType::XHeader => {
            let mut path = None;
            for record in tar::PaxExtensions::new(&data) {
                let record = record.map_err(|e| invalid(format!("unreadable PAX records ({e})")))?;
                match record.key() {
                    Ok("path") => path = Some(record.value_bytes().to_vec()),
                    Ok("size") => return Err(invalid("PAX size records are not taken: no entry may exceed 8 GiB")),
                    _ => {}
                }
            }
            Ok(path)
        }
        _ => Ok(None),
    }
}
