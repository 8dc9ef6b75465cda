//! The tenant volumes on disk: path confinement, layout folders, durable
//! appends to rollout files and atomic writes of Markdown and JSON files.

pub mod archive;
pub mod publish;
mod rollout_text;

use crate::domain::ids::WorkspaceName;
use crate::domain::layout::ValidLayout;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("path must be non-empty")]
    Empty,
    #[error("path must be relative: {0}")]
    Absolute(String),
    #[error("path must not escape root: {0}")]
    Escapes(String),
    #[error("could not resolve path: {0}")]
    Io(#[from] io::Error),
}

/// The one gate between a relative path from anywhere (API, layout, tool
/// call) and the disk: the result lies under `root`, also after following
/// every symlink that exists on the way.
pub fn confine(root: &Path, relative: &str) -> Result<PathBuf, PathError> {
    let mut joined = root.to_path_buf();
    each_relative_part(relative, |name| joined.push(name))?;
    // The common case costs one `lstat` per component below `root` and no
    // `realpath`: with no symlink among them the path is under `root`,
    // wherever `root` itself resolves to.
    if symlink_free_below(root, &joined)? {
        return Ok(joined);
    }
    let real_root = match root.canonicalize() {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(joined),
        Err(e) => return Err(e.into()),
    };
    let mut existing = joined.as_path();
    loop {
        match existing.canonicalize() {
            Ok(real) => {
                if real.starts_with(&real_root) {
                    return Ok(joined);
                }
                return Err(PathError::Escapes(relative.to_owned()));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if fs::symlink_metadata(existing).is_ok() {
                    // A dangling symlink: it could be created to point anywhere.
                    return Err(PathError::Escapes(relative.to_owned()));
                }
                match existing.parent() {
                    Some(parent) if parent.starts_with(root) => existing = parent,
                    _ => return Ok(joined),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Walks the names `relative` steps through, by the rules alone: not
/// empty, not absolute, no `..`; `.` and repeated slashes step nowhere (`.`
/// alone is the root itself). [`confine`] pushes them onto a root and then
/// checks the disk; an object key is made of them (a bucket has no
/// symlinks). Returns how many names there were.
pub fn each_relative_part(relative: &str, mut part: impl FnMut(&str)) -> Result<usize, PathError> {
    if relative.is_empty() {
        return Err(PathError::Empty);
    }
    let mut count = 0;
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(name) => {
                part(name.to_str().expect("a part of a str is a str"));
                count += 1;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(PathError::Absolute(relative.to_owned())),
            Component::ParentDir => return Err(PathError::Escapes(relative.to_owned())),
        }
    }
    Ok(count)
}

/// Whether no component of `joined` below `root` that exists is a symlink
/// (past the first missing one, none exists).
fn symlink_free_below(root: &Path, joined: &Path) -> io::Result<bool> {
    let mut prefix = root.to_path_buf();
    for part in joined.strip_prefix(root).map_err(io::Error::other)?.components() {
        prefix.push(part);
        match fs::symlink_metadata(&prefix) {
            Ok(meta) if meta.file_type().is_symlink() => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The workspaces a tenant's folder holds: its subfolders named as a
/// workspace can be.
pub fn workspaces_in(tenant_dir: &Path) -> Vec<WorkspaceName> {
    let Ok(entries) = fs::read_dir(tenant_dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| WorkspaceName::parse(e.file_name().to_str()?))
        .collect()
}

/// Readiness fails below this much free space even with the watermark off:
/// by then no write can be trusted to complete.
pub const HARD_MIN_FREE_BYTES: u64 = 64 * 1024;

/// `<data_dir>/workspaces`: one volume per tenant below it.
#[derive(Debug, Clone)]
pub struct Volumes {
    data_dir: PathBuf,
    root: PathBuf,
    /// `MEMORYD_MIN_FREE_BYTES`: the free space new data must leave (0: off).
    min_free_bytes: u64,
    /// The last reading of the free space and when it was taken.
    last_free: Arc<Mutex<Option<(Instant, u64)>>>,
    /// Where rollouts live when not here: an object store, their lines
    /// journaled in the database until their objects hold them (SPEC §6.1).
    bucket: Option<Arc<crate::bucket::Bucket>>,
    /// This replica's copies of memory files that live in the bucket.
    cache: Option<Arc<crate::bucket::cache::WorkspaceCache>>,
}

/// How long a reading of the free space answers [`Volumes::has_room`] while
/// it is at least [`FREE_READING_MARGIN`] above the watermark: more than any
/// disk fills in that time, and a `statvfs` a request was 1.4 % of ingest.
const FREE_READING_LIFE: Duration = Duration::from_millis(250);
const FREE_READING_MARGIN: u64 = 256 << 20;

impl Volumes {
    pub fn new(data_dir: &Path, min_free_bytes: u64) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            root: data_dir.join("workspaces"),
            min_free_bytes,
            last_free: Arc::default(),
            bucket: None,
            cache: None,
        }
    }

    /// These volumes with their workspace files in `bucket`, and copies of
    /// memory files, `cache_bytes` at most, where the workspaces were.
    pub fn with_bucket(mut self, bucket: crate::bucket::Bucket, cache_bytes: u64) -> io::Result<Self> {
        let jobs_root = self.data_dir.join("job-copies");
        let cache = crate::bucket::cache::WorkspaceCache::new(self.root.clone(), jobs_root, cache_bytes)?;
        self.bucket = Some(Arc::new(bucket));
        self.cache = Some(Arc::new(cache));
        Ok(self)
    }

    /// A workspace's files for reading, as one generation while the result
    /// is held: on a volume, where they are; from a bucket, this replica's
    /// copy, brought up to date first.
    pub async fn readable(
        &self,
        store: &dyn crate::store::WorkspaceFilesStore,
        tenant: Uuid,
        workspace: &WorkspaceName,
    ) -> Result<crate::bucket::cache::ReadableWorkspace, crate::bucket::files::FilesError> {
        match (&self.bucket, &self.cache) {
            (Some(bucket), Some(cache)) => cache.readable(bucket, store, tenant, workspace).await,
            _ => Ok(crate::bucket::cache::ReadableWorkspace::on_volume(self.workspace_root(tenant, workspace)?)),
        }
    }

    /// A workspace's files for job `job_id` to read while it runs (see
    /// [`crate::bucket::cache::JobWorkspace`]).
    pub async fn for_job(
        &self,
        store: &dyn crate::store::WorkspaceFilesStore,
        tenant: Uuid,
        workspace: &WorkspaceName,
        job_id: Uuid,
    ) -> Result<crate::bucket::cache::JobWorkspace, crate::bucket::files::FilesError> {
        match (&self.bucket, &self.cache) {
            (Some(bucket), Some(cache)) => cache.job_copy(bucket, store, tenant, workspace, job_id).await,
            _ => Ok(crate::bucket::cache::JobWorkspace::on_volume(self.workspace_root(tenant, workspace)?)),
        }
    }

    /// This replica's copies of memory files in a bucket, if they live there.
    pub fn cache(&self) -> Option<&Arc<crate::bucket::cache::WorkspaceCache>> {
        self.cache.as_ref()
    }

    /// The object store the rollouts live in, if not here.
    pub fn bucket(&self) -> Option<&Arc<crate::bucket::Bucket>> {
        self.bucket.as_ref()
    }

    /// `(tenant, its volume)` for every tenant volume on disk.
    pub fn tenant_dirs(&self) -> Vec<(Uuid, PathBuf)> {
        let Ok(entries) = fs::read_dir(&self.root) else { return Vec::new() };
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| Some((Uuid::parse_str(e.file_name().to_str()?).ok()?, e.path())))
            .collect()
    }

    /// Bytes an unprivileged writer may still use on the data volume.
    pub fn free_bytes(&self) -> io::Result<u64> {
        let stat = rustix::fs::statvfs(&self.data_dir)?;
        Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
    }

    /// New data may be written: the volume's free space is above the
    /// watermark, which keeps room for the database (SQLite lives on this
    /// volume) to commit what is already under way. An unreadable volume is
    /// left to the write itself to report.
    pub fn has_room(&self) -> bool {
        if self.min_free_bytes == 0 {
            return true;
        }
        let last = || self.last_free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let remembered = *last();
        if let Some((at, free)) = remembered
            && at.elapsed() < FREE_READING_LIFE
            && free >= self.min_free_bytes.saturating_add(FREE_READING_MARGIN)
        {
            return true;
        }
        // Read with the lock released: other requests need not wait on the system call.
        match self.free_bytes() {
            Ok(free) => {
                *last() = Some((Instant::now(), free));
                free >= self.min_free_bytes
            }
            Err(_) => true,
        }
    }

    /// The free space below which `/readyz` fails.
    pub fn ready_floor(&self) -> u64 {
        self.min_free_bytes.max(HARD_MIN_FREE_BYTES)
    }

    /// `<volumes>/<tenant>`: a tenant's whole volume.
    /// Where the API keeps uploaded archives until their import jobs are done.
    pub fn imports_dir(&self) -> PathBuf {
        self.data_dir.join("imports")
    }

    /// The archive of import job `job_id`.
    pub fn import_archive(&self, job_id: Uuid) -> PathBuf {
        self.imports_dir().join(format!("{job_id}.tar.gz"))
    }

    /// The bytes new data may take before the free-space watermark is reached.
    pub fn spare_bytes(&self) -> io::Result<u64> {
        Ok(self.free_bytes()?.saturating_sub(self.ready_floor()))
    }

    /// Where exports keep their snapshots: beside the workspaces, on the
    /// same filesystem, so that a snapshot is made of hard links.
    pub fn export_scratch(&self) -> PathBuf {
        self.data_dir.join("exports")
    }

    pub fn tenant_root(&self, tenant: Uuid) -> Result<PathBuf, PathError> {
        confine(&self.root, &tenant.to_string())
    }

    /// `<volumes>/<tenant>/<workspace>`; both parts are validated ids, and the
    /// result still goes through [`confine`].
    pub fn workspace_root(&self, tenant: Uuid, workspace: &WorkspaceName) -> Result<PathBuf, PathError> {
        confine(&self.root, &format!("{tenant}/{workspace}"))
    }
}

fn ensure_file(path: &Path) -> io::Result<()> {
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => file.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The files every layout's memories folder starts with, empty (R-LAY-3).
pub const STARTING_FILES: [&str; 2] = ["MEMORY.md", "memory_summary.md"];

/// The folders every layout's memories folder starts with (R-LAY-3).
pub const STARTING_FOLDERS: [&str; 3] = ["raw_memories", "rollout_summaries", "skills"];

/// R-LAY-3: the layout's folders and empty `MEMORY.md` / `memory_summary.md`.
pub fn ensure_layout(workspace_root: &Path, layout: &ValidLayout) -> Result<(), PathError> {
    let sessions = confine(workspace_root, &layout.sessions_dir.normalized)?;
    let memories = confine(workspace_root, &layout.memories_dir.normalized)?;
    fs::create_dir_all(&sessions)?;
    for sub in STARTING_FOLDERS {
        fs::create_dir_all(confine(&memories, sub)?)?;
    }
    for file in STARTING_FILES {
        ensure_file(&confine(&memories, file)?)?;
    }
    Ok(())
}

/// Appends `line` at `committed_len`: anything beyond it is the tail of a
/// write that was never acknowledged and is cut first. Returns the new
/// committed length once the bytes are on disk.
pub fn append_durably(path: &Path, committed_len: u64, line: &[u8]) -> io::Result<u64> {
    let written = append_unsynced(path, committed_len, line)?;
    written.file.sync_data()?;
    if written.created
        && let Some(parent) = path.parent()
    {
        sync_dir(parent)?;
    }
    Ok(written.new_len)
}

/// A line appended and not yet on disk.
struct UnsyncedAppend {
    file: File,
    new_len: u64,
    /// The file may be new: its folder's entry is to be synced too.
    created: bool,
    /// The filesystem it is on.
    device: u64,
}

fn append_unsynced(path: &Path, committed_len: u64, line: &[u8]) -> io::Result<UnsyncedAppend> {
    let file = OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    let metadata = file.metadata()?;
    let on_disk = metadata.len();
    // A rollout's first line finds an empty file, one this open created or
    // an earlier attempt left: either way its folder's entry is synced.
    let created = committed_len == 0 && on_disk == 0;
    let device = std::os::unix::fs::MetadataExt::dev(&metadata);
    if on_disk < committed_len {
        return Err(io::Error::other(format!(
            "rollout file is shorter ({on_disk} bytes) than its committed length ({committed_len})"
        )));
    }
    if on_disk > committed_len {
        file.set_len(committed_len)?;
    }
    std::os::unix::fs::FileExt::write_all_at(&file, line, committed_len)?;
    Ok(UnsyncedAppend { file, new_len: committed_len + line.len() as u64, created, device })
}

/// A line for [`append_all_durably`]: `line` goes at `committed_len` of `path`.
pub struct LineAppend {
    pub path: PathBuf,
    pub committed_len: u64,
    pub line: std::sync::Arc<str>,
}

/// Appends each line as [`append_durably`] does, making them durable
/// together: the lines are written, then each filesystem they are on is
/// synced once (`syncfs`), instead of one `fdatasync` per file. A journaling
/// filesystem commits its journal once per sync, one after the other: on the
/// development machine (ext4) 30 appends took 6.6 ms by `fdatasync` in
/// parallel and 1.5 ms by one `syncfs`. `syncfs` also flushes whatever else
/// is dirty on the filesystem, so a lone line uses `fdatasync`.
///
/// Returns each line's new committed length, or why it is not durable (a
/// failed sync fails every line on that filesystem).
pub fn append_all_durably(lines: &[LineAppend]) -> Vec<io::Result<u64>> {
    if let [only] = lines {
        return vec![append_durably(&only.path, only.committed_len, only.line.as_bytes())];
    }
    let written: Vec<io::Result<(UnsyncedAppend, u64)>> = lines
        .iter()
        .map(|l| {
            let append = append_unsynced(&l.path, l.committed_len, l.line.as_bytes())?;
            let device = append.device;
            Ok((append, device))
        })
        .collect();
    // One sync per filesystem (by device); its failure, remembered as kind
    // and text, fails every line there.
    let mut syncs: Vec<(u64, Option<SyncFailure>)> = Vec::new();
    for (append, device) in written.iter().flatten() {
        if !syncs.iter().any(|(d, _)| d == device) {
            syncs.push((*device, sync_filesystem(&append.file).err().map(|e| (e.kind(), e.to_string()))));
        }
    }
    written
        .into_iter()
        .map(|w| {
            let (append, device) = w?;
            match syncs.iter().find(|(d, _)| *d == device) {
                Some((_, Some((kind, text)))) => Err(io::Error::new(*kind, text.clone())),
                _ => Ok(append.new_len),
            }
        })
        .collect()
}

type SyncFailure = (io::ErrorKind, String);

/// Every write on the filesystem holding `file` (data, sizes, new directory
/// entries) on disk. Since Linux 5.8 `syncfs` reports writeback errors.
#[cfg(target_os = "linux")]
fn sync_filesystem(file: &File) -> io::Result<()> {
    rustix::fs::syncfs(file).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn sync_filesystem(_file: &File) -> io::Result<()> {
    // Without syncfs, a full sync is the durable choice.
    rustix::fs::sync();
    Ok(())
}

/// The acknowledged part of a rollout file: its first `committed_len` bytes.
pub fn read_committed(path: &Path, committed_len: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(committed_len as usize);
    File::open(path)?.take(committed_len).read_to_end(&mut buf)?;
    if (buf.len() as u64) < committed_len {
        return Err(io::Error::other("rollout file is shorter than its committed length"));
    }
    Ok(buf)
}

/// Temp file in the same folder, fsync, rename, fsync the folder: readers see
/// the old or the new content, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8], owner: Uuid) -> io::Result<()> {
    stage(path, bytes, owner)?.publish()
}

/// A file written and fsync'd under a temporary name next to its
/// destination; `publish` renames it into place. Dropped unpublished, it
/// disappears. Splitting the two lets the slow part (the data's fsync) run
/// outside a lock and only the rename inside it.
pub struct StagedFile {
    tmp: tempfile::TempPath,
    dest: PathBuf,
}

/// Temporary files are named `.memoryd-<owner>-<random>.tmp`, the owner being
/// the job that writes them, so that what a killed attempt left behind can be
/// told from what a live one is writing, and removed (SPEC §9).
const STAGED_PREFIX: &str = ".memoryd-";
const STAGED_SUFFIX: &str = ".tmp";

pub fn stage(path: &Path, bytes: &[u8], owner: Uuid) -> io::Result<StagedFile> {
    stage_from(path, &mut &bytes[..], owner).map(|(file, _)| file)
}

/// As [`stage`], the content read from `content` as it is written (an
/// import's files, too big to hold); also the bytes written.
pub fn stage_from(path: &Path, content: &mut dyn Read, owner: Uuid) -> io::Result<(StagedFile, u64)> {
    let dir = path.parent().ok_or_else(|| io::Error::other("path has no parent"))?;
    fs::create_dir_all(dir)?;
    let mut tmp =
        tempfile::Builder::new().prefix(&format!("{STAGED_PREFIX}{owner}-")).suffix(STAGED_SUFFIX).tempfile_in(dir)?;
    let written = io::copy(content, &mut tmp)?;
    tmp.as_file().sync_all()?;
    Ok((StagedFile { tmp: tmp.into_temp_path(), dest: path.to_path_buf() }, written))
}

/// A temporary file found on disk.
#[derive(Debug)]
pub struct Leftover {
    pub path: PathBuf,
    /// The job that wrote it; `None` for the `.tmpXXXXXX` names of releases
    /// before owners were recorded.
    pub owner: Option<Uuid>,
    pub modified: std::time::SystemTime,
}

fn leftover_owner(name: &str) -> Option<Option<Uuid>> {
    if let Some(rest) = name.strip_prefix(STAGED_PREFIX).and_then(|r| r.strip_suffix(STAGED_SUFFIX)) {
        return rest.get(..36).and_then(|id| Uuid::parse_str(id).ok()).map(Some);
    }
    let legacy =
        name.strip_prefix(".tmp").is_some_and(|r| r.len() == 6 && r.bytes().all(|b| b.is_ascii_alphanumeric()));
    legacy.then_some(None)
}

/// A name memoryd gives its temporary files (a write or publish under way).
pub fn is_temporary_file(name: &std::ffi::OsStr) -> bool {
    name.to_str().and_then(leftover_owner).is_some()
}

/// Every regular file under `dir`, in all its subfolders, with its metadata
/// (symlinks are not followed; a missing `dir` has none, and a file removed
/// while the walk runs is left out).
pub fn files_under(dir: &Path) -> io::Result<Vec<(PathBuf, fs::Metadata)>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                match entry.metadata() {
                    Ok(meta) => found.push((entry.path(), meta)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(found)
}

/// The files of a folder memoryd writes (a memory folder), by path relative
/// to it, sorted: its own temporary files (a publish under way) left out.
pub fn folder_files(dir: &Path) -> io::Result<Vec<(String, fs::Metadata)>> {
    let mut files = Vec::new();
    for (path, meta) in files_under(dir)? {
        if path.file_name().is_some_and(is_temporary_file) {
            continue;
        }
        let relative = path.strip_prefix(dir).map_err(io::Error::other)?;
        files.push((relative.to_string_lossy().into_owned(), meta));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// Every temporary file under `dir`, in all its subfolders.
pub fn find_leftovers(dir: &Path) -> io::Result<Vec<Leftover>> {
    let mut found = Vec::new();
    for (path, meta) in files_under(dir)? {
        if let Some(owner) = path.file_name().and_then(|n| n.to_str()).and_then(leftover_owner) {
            found.push(Leftover { path, owner, modified: meta.modified()? });
        }
    }
    Ok(found)
}

/// Removes what earlier attempts of job `owner` left under `dir`.
pub fn remove_leftovers_of(dir: &Path, owner: Uuid) -> io::Result<usize> {
    let mut removed = 0;
    for leftover in find_leftovers(dir)?.into_iter().filter(|l| l.owner == Some(owner)) {
        remove_if_present(&leftover.path)?;
        removed += 1;
    }
    Ok(removed)
}

pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl StagedFile {
    /// The temporary file's name in the destination's folder.
    pub fn staged_name(&self) -> String {
        self.tmp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Leaves the temporary file on disk when this is dropped: a manifest
    /// that names it has taken it over.
    pub fn keep(self) -> io::Result<()> {
        self.tmp.keep().map(drop).map_err(|e| e.error)
    }

    pub fn publish(self) -> io::Result<()> {
        self.tmp.persist(&self.dest).map_err(|e| e.error)?;
        sync_dir(self.dest.parent().ok_or_else(|| io::Error::other("path has no parent"))?)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
