//! Workspace archives (SPEC §2.7). An export first takes a snapshot of the
//! workspace's files as hard links in a scratch folder of the same volume:
//! a link keeps a file's content as it was even when a publish renames a
//! new one over it or a forget removes it, so the archive can then be
//! written at the client's pace without holding anything up. The archive is
//! a gzip tar written to any `Write`, never whole in memory.

use super::{files_under, is_temporary_file};
use crate::domain::layout::StoredLayout;
use crate::domain::portability::{ExportView, ExportedRollout, Take, take};
use flate2::Compression;
use flate2::write::GzEncoder;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How often a snapshot is taken again when a publish changed the memory
/// folders while it was being taken.
const SNAPSHOT_TRIES: usize = 5;

/// The names of snapshot folders under the scratch folder begin so.
const SNAPSHOT_PREFIX: &str = "export-";

/// A file of a snapshot: its path under the workspace, its link, its length
/// and modification time (seconds since the epoch) when linked.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    pub relative: String,
    pub linked: PathBuf,
    pub len: u64,
    pub modified: u64,
}

/// The workspace's files as of one instant, linked under a scratch folder
/// that is removed when the snapshot is dropped.
pub struct Snapshot {
    _dir: tempfile::TempDir,
    pub files: Vec<SnapshotFile>,
}

impl Snapshot {
    /// Where a file the links could not take (a rollout whose object and
    /// journal live in a bucket) is written under the snapshot's folder (its
    /// folders made); [`Snapshot::record`] then adds it.
    pub fn place_for(&self, relative: &str) -> io::Result<PathBuf> {
        let linked = super::confine(self._dir.path(), relative).map_err(io::Error::other)?;
        if let Some(parent) = linked.parent() {
            fs::create_dir_all(parent)?;
        }
        Ok(linked)
    }

    /// Adds the file written at `linked` (from [`Snapshot::place_for`]).
    pub fn record(&mut self, relative: &str, linked: PathBuf, len: u64, modified: u64) {
        let file = SnapshotFile { relative: relative.to_owned(), linked, len, modified };
        let at = self.files.partition_point(|f| f.relative.as_str() < relative);
        self.files.insert(at, file);
    }
}

/// Links every file under `root` (temporary files left out) into a new
/// folder under `scratch`. The files under `memory_dirs` (relative to
/// `root`) are taken all from one instant: when a publish renamed or
/// removed one of them while the links were made, the snapshot is taken
/// again. Rollout files only grow, and the export takes their committed
/// prefix, so their links need no such care.
pub fn snapshot(root: &Path, scratch: &Path, memory_dirs: &[String]) -> io::Result<Snapshot> {
    fs::create_dir_all(scratch)?;
    for _ in 0..SNAPSHOT_TRIES {
        let dir = tempfile::Builder::new().prefix(SNAPSHOT_PREFIX).tempdir_in(scratch)?;
        let before = memory_inodes(root, memory_dirs)?;
        if let Some(files) = link_all(root, dir.path(), memory_dirs, &before)?
            && memory_inodes(root, memory_dirs)? == before
        {
            return Ok(Snapshot { _dir: dir, files });
        }
    }
    Err(io::Error::other("the workspace's memory kept changing while the export was taken; try again"))
}

/// The links of every file, or `None` when a memory file is no longer the
/// one `before` listed.
fn link_all(
    root: &Path,
    into: &Path,
    memory_dirs: &[String],
    before: &BTreeMap<String, u64>,
) -> io::Result<Option<Vec<SnapshotFile>>> {
    let mut files = Vec::new();
    for (path, _) in files_under(root)? {
        if path.file_name().is_some_and(is_temporary_file) {
            continue;
        }
        let Some(relative) = relative_text(root, &path) else { continue };
        let linked = into.join(&relative);
        if let Some(parent) = linked.parent() {
            fs::create_dir_all(parent)?;
        }
        match fs::hard_link(&path, &linked) {
            Ok(()) => {}
            // Removed since the walk listed it (a forget, a publish's delete).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            // A scratch folder on another filesystem: a copy, then.
            Err(e) if e.kind() == io::ErrorKind::CrossesDevices => match fs::copy(&path, &linked) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
        let meta = fs::metadata(&linked)?;
        let inode = fs::metadata(&path).map(|m| m.ino()).unwrap_or(meta.ino());
        if in_memory_dirs(&relative, memory_dirs) && before.get(&relative) != Some(&inode) {
            return Ok(None);
        }
        let modified = meta.mtime().max(0) as u64;
        files.push(SnapshotFile { relative, linked, len: meta.len(), modified });
    }
    files.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(Some(files))
}

/// `path` under `root` with `/` separators; `None` for a name that is not
/// UTF-8 (memoryd writes none).
fn relative_text(root: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = relative.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

fn in_memory_dirs(relative: &str, memory_dirs: &[String]) -> bool {
    memory_dirs.iter().any(|dir| relative.strip_prefix(dir.as_str()).is_some_and(|rest| rest.starts_with('/')))
}

/// Every file under the memory folders, by path, with its inode: a publish
/// replaces files by renaming, which changes their inodes.
fn memory_inodes(root: &Path, memory_dirs: &[String]) -> io::Result<BTreeMap<String, u64>> {
    let mut inodes = BTreeMap::new();
    for dir in memory_dirs {
        for (path, meta) in files_under(&root.join(dir))? {
            if path.file_name().is_some_and(is_temporary_file) {
                continue;
            }
            if let Some(relative) = relative_text(root, &path) {
                inodes.insert(relative, meta.ino());
            }
        }
    }
    Ok(inodes)
}

/// Removes the snapshots under `scratch` made more than `older_than` ago
/// (their process died before it removed them); how many.
pub fn remove_stale_snapshots(scratch: &Path, older_than: std::time::Duration) -> io::Result<usize> {
    let entries = match fs::read_dir(scratch) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let old = entry.metadata()?.modified()?.elapsed().is_ok_and(|age| age > older_than);
        if old && entry.file_name().to_str().is_some_and(|n| n.starts_with(SNAPSHOT_PREFIX)) {
            fs::remove_dir_all(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// One file of an archive: where it goes, where its bytes come from, and
/// how many of them.
#[derive(Debug, Clone)]
pub struct ArchiveEntry {
    pub relative: String,
    pub source: PathBuf,
    pub len: u64,
    pub modified: u64,
}

/// What an export, or a copy into a bucket, takes of a snapshot: each
/// rollout file up to its committed length (one no append committed left
/// out), every other file whole; and the rollouts it took.
pub fn entries_taken<'v>(
    files: &[SnapshotFile],
    view: &'v ExportView,
    layouts: &[StoredLayout],
) -> (Vec<ArchiveEntry>, Vec<&'v ExportedRollout>) {
    let by_path: std::collections::HashMap<&str, &ExportedRollout> =
        view.rollouts.iter().map(|r| (r.rollout_path.as_str(), r)).collect();
    let mut entries = Vec::with_capacity(files.len());
    let mut rollouts = Vec::new();
    for file in files {
        let len = match take(&file.relative, &by_path, layouts) {
            Take::Whole => file.len,
            Take::Prefix(committed) => {
                rollouts.push(by_path[file.relative.as_str()]);
                committed
            }
            Take::Nothing => continue,
        };
        let (relative, source, modified) = (file.relative.clone(), file.linked.clone(), file.modified);
        entries.push(ArchiveEntry { relative, source, len, modified });
    }
    (entries, rollouts)
}

/// Writes a gzip tar to `out`: `manifest` first, as `manifest_name`, then
/// each entry's first `len` bytes. Returns `out`, everything flushed.
pub fn write_archive<W: Write>(
    out: W,
    manifest_name: &str,
    manifest: &[u8],
    entries: &[ArchiveEntry],
) -> io::Result<W> {
    let mut tar = tar::Builder::new(GzEncoder::new(out, Compression::fast()));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    tar.append_data(&mut file_header(manifest.len() as u64, now), manifest_name, manifest)?;
    for entry in entries {
        let file = fs::File::open(&entry.source)?;
        if file.metadata()?.len() < entry.len {
            return Err(io::Error::other(format!("{} is shorter than its committed length", entry.relative)));
        }
        tar.append_data(&mut file_header(entry.len, entry.modified), &entry.relative, file.take(entry.len))?;
    }
    tar.into_inner()?.finish()
}

fn file_header(len: u64, modified: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(len);
    header.set_mode(0o644);
    header.set_mtime(modified);
    header
}

/// A `Write` that hands what is written to an async receiver in chunks: the
/// archive is written on a blocking thread while the response streams it.
pub struct ChunkSender {
    sender: tokio::sync::mpsc::Sender<io::Result<Vec<u8>>>,
    buffer: Vec<u8>,
    /// A client that takes no chunk for this long has stalled: the archive stops.
    stall: std::time::Duration,
}

/// The size of the chunks a [`ChunkSender`] sends.
const CHUNK: usize = 64 * 1024;

impl ChunkSender {
    /// Must be made on a blocking thread of the runtime (it waits on it).
    pub fn new(sender: tokio::sync::mpsc::Sender<io::Result<Vec<u8>>>, stall: std::time::Duration) -> Self {
        Self { sender, buffer: Vec::with_capacity(CHUNK), stall }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK));
        let sent = tokio::runtime::Handle::current()
            .block_on(async { tokio::time::timeout(self.stall, self.sender.send(Ok(chunk))).await });
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client stopped reading the export")),
            Err(_) => {
                Err(io::Error::new(io::ErrorKind::TimedOut, "the client read nothing of the export for too long"))
            }
        }
    }
}

impl Write for ChunkSender {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_archive(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut content = Vec::new();
                e.read_to_end(&mut content).unwrap();
                (e.path().unwrap().to_string_lossy().into_owned(), content)
            })
            .collect()
    }

    #[test]
    fn a_snapshot_keeps_files_as_they_were_and_the_archive_takes_prefixes() {
        let workspace = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let root = workspace.path();
        fs::create_dir_all(root.join("memories/raw_memories")).unwrap();
        fs::create_dir_all(root.join("sessions")).unwrap();
        fs::write(root.join("memories/MEMORY.md"), "before").unwrap();
        fs::write(root.join("memories/raw_memories/r.md"), "raw").unwrap();
        fs::write(root.join("sessions/r.jsonl"), "{\"a\":1}\n{\"partial").unwrap();
        fs::write(root.join("memories/.memoryd-00000000-0000-0000-0000-000000000000-x.tmp"), "t").unwrap();
        let long = format!("memories/{}.md", "n".repeat(150));
        fs::write(root.join(&long), "long name").unwrap();
        let snapshot = snapshot(root, scratch.path(), &["memories".into()]).unwrap();
        // A publish after the snapshot replaces MEMORY.md; a forget removes the rollout.
        fs::write(root.join("memories/MEMORY.new"), "after").unwrap();
        fs::rename(root.join("memories/MEMORY.new"), root.join("memories/MEMORY.md")).unwrap();
        fs::remove_file(root.join("sessions/r.jsonl")).unwrap();
        let names: Vec<&str> = snapshot.files.iter().map(|f| f.relative.as_str()).collect();
        assert!(!names.iter().any(|n| n.ends_with(".tmp")), "temporary files are left out: {names:?}");
        let entries: Vec<ArchiveEntry> = snapshot
            .files
            .iter()
            .map(|f| ArchiveEntry {
                relative: f.relative.clone(),
                source: f.linked.clone(),
                len: if f.relative.ends_with(".jsonl") { 8 } else { f.len },
                modified: f.modified,
            })
            .collect();
        let bytes = write_archive(Vec::new(), "manifest.json", b"{}", &entries).unwrap();
        let read = read_archive(&bytes);
        assert_eq!(read[0], ("manifest.json".to_owned(), b"{}".to_vec()), "the manifest comes first");
        let content = |name: &str| read.iter().find(|(n, _)| n == name).map(|(_, c)| c.clone()).unwrap();
        assert_eq!(content("memories/MEMORY.md"), b"before", "as of the snapshot");
        assert_eq!(content("sessions/r.jsonl"), b"{\"a\":1}\n", "the committed prefix of a file since removed");
        assert_eq!(content(&long), b"long name", "names past 100 bytes survive");
        drop(snapshot);
        assert!(fs::read_dir(scratch.path()).unwrap().next().is_none(), "the links go with the snapshot");
    }

    #[test]
    fn only_old_snapshots_are_removed() {
        let scratch = tempfile::tempdir().unwrap();
        fs::create_dir_all(scratch.path().join("export-old/memories")).unwrap();
        fs::create_dir_all(scratch.path().join("something-else")).unwrap();
        assert_eq!(remove_stale_snapshots(scratch.path(), std::time::Duration::from_secs(3600)).unwrap(), 0);
        assert_eq!(remove_stale_snapshots(scratch.path(), std::time::Duration::ZERO).unwrap(), 1);
        assert!(scratch.path().join("something-else").exists() && !scratch.path().join("export-old").exists());
        assert_eq!(remove_stale_snapshots(&scratch.path().join("missing"), std::time::Duration::ZERO).unwrap(), 0);
    }

    #[test]
    fn a_prefix_longer_than_the_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("short"), "abc").unwrap();
        let entry = ArchiveEntry { relative: "short".into(), source: dir.path().join("short"), len: 10, modified: 0 };
        let err = write_archive(Vec::new(), "m.json", b"{}", &[entry]).unwrap_err();
        assert!(err.to_string().contains("shorter"), "{err}");
    }
}
