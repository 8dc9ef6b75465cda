//! Publishing a job's files all at once, crash-safely (SPEC §4).
//!
//! An attempt's files are first *staged*: written and fsync'd under temporary
//! names beside their destinations, with a manifest that lists them in
//! `<data_dir>/publish/<publish id>.json`. The job's fenced finish records
//! the publish id in the database, and only then are the staged files renamed
//! into place and the manifest removed. A manifest found later — its process
//! died, or another worker got there first — is completed when the database
//! holds its id and undone otherwise; both are idempotent, so two processes
//! may finish one manifest at once.
//!
//! A finished manifest is not deleted but moved to `publish/spare/`, and the
//! next manifest this process writes is written over it: creating and
//! deleting a file for every publish costs each new inode a walk past every
//! recently freed one on an ext4 without a journal (13 % of the CPU of a
//! drain of phase ones on the development machine). Renames keep it safe: a
//! manifest is visible (`<id>.json`) only once its content is synced, and of
//! two processes finishing one manifest only one moves it.

use super::{StagedFile, confine, remove_if_present, stage, stage_from, sync_dir, write_atomic};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// The files one attempt changes in one workspace: plain data. Paths are
/// relative to the workspace root; `None` deletes the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileChanges {
    pub edits: Vec<(String, Option<Vec<u8>>)>,
}

impl FileChanges {
    pub fn write(&mut self, path: String, bytes: impl Into<Vec<u8>>) {
        self.edits.push((path, Some(bytes.into())));
    }

    pub fn delete(&mut self, path: String) {
        self.edits.push((path, None));
    }

    pub fn paths(&self) -> Vec<String> {
        self.edits.iter().map(|(p, _)| p.clone()).collect()
    }
}

/// Which job's which memory a manifest belongs to: recovery before an
/// attempt handles the manifests of its own layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishScope {
    pub job_id: Uuid,
    pub tenant: Uuid,
    pub workspace: String,
    pub layout: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ManifestEntry {
    /// Relative to the workspace root.
    path: String,
    /// The staged file's name beside the destination; `None`: delete.
    staged: Option<String>,
}

/// A staged publish, as recorded on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub publish_id: Uuid,
    pub scope: PublishScope,
    root: PathBuf,
    entries: Vec<ManifestEntry>,
    /// What the publish adds to the workspace's bytes (negative: frees),
    /// against the files as they were when it was staged.
    #[serde(default)]
    pub bytes_delta: i64,
}

impl Manifest {
    /// Renames every staged file into place and removes what the run
    /// deleted, then the manifest. A staged file already gone was renamed by
    /// an earlier try. Before a removal the manifest must still be there:
    /// once it is gone another process has finished the publish, and a later
    /// run may have written the file (this narrows that window from a whole
    /// job to a check and an unlink).
    pub fn apply(&self, publisher: &Publisher) -> io::Result<()> {
        let mut dirs = BTreeSet::new();
        let manifest = publisher.manifest_path(self.publish_id);
        for (n, entry) in self.entries.iter().enumerate() {
            if n == 1
                && let Some(pause) = publisher.pause_after_first_rename
            {
                std::thread::sleep(pause);
            }
            if entry.staged.is_none() && !manifest.try_exists()? {
                return Ok(());
            }
            let dest = confine(&self.root, &entry.path).map_err(io::Error::other)?;
            let dir = dest.parent().ok_or_else(|| io::Error::other("a published path has no folder"))?.to_owned();
            match &entry.staged {
                Some(name) => match std::fs::rename(dir.join(name), &dest) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
                None => remove_if_present(&dest)?,
            }
            dirs.insert(dir);
        }
        for dir in dirs {
            match sync_dir(&dir) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        publisher.forget(self.publish_id)
    }

    /// Removes the staged files and the manifest: nothing becomes visible.
    pub fn discard(&self, publisher: &Publisher) -> io::Result<()> {
        for name in self.staged_files() {
            remove_if_present(&name)?;
        }
        publisher.forget(self.publish_id)
    }

    /// The staged files this manifest will rename.
    pub fn staged_files(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter_map(|entry| {
                let dest = confine(&self.root, &entry.path).ok()?;
                Some(dest.parent()?.join(entry.staged.as_ref()?))
            })
            .collect()
    }
}

/// Finished manifests this process moved aside, to be written over.
const MOST_SPARES: usize = 64;

/// `<data_dir>/publish`: the manifests of publishes under way.
#[derive(Debug, Clone)]
pub struct Publisher {
    dir: PathBuf,
    /// A test hook: every publish stops this long after its first rename,
    /// so that a test can read in the middle of one.
    pause_after_first_rename: Option<std::time::Duration>,
    /// The files in `spare/` this process moved there and may reuse.
    spares: std::sync::Arc<std::sync::Mutex<Vec<PathBuf>>>,
}

impl Publisher {
    pub fn new(data_dir: &Path) -> Self {
        Self { dir: data_dir.join("publish"), pause_after_first_rename: None, spares: Default::default() }
    }

    fn spare_dir(&self) -> PathBuf {
        self.dir.join("spare")
    }

    /// Removes the spare manifests an earlier life of a process left (at
    /// start-up: another process's spares only cost it a new file).
    pub fn clear_spares(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(self.spare_dir()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Writes `text` as the manifest at `path`: over a spare file when
    /// there is one (synced, then renamed into place, then the folder
    /// synced), as a new file otherwise.
    fn write_manifest(&self, path: &Path, text: &[u8], owner: Uuid) -> io::Result<()> {
        loop {
            let spare = self.spares.lock().expect("the spares' lock is never poisoned").pop();
            let Some(spare) = spare else { return write_atomic(path, text, owner) };
            let mut file = match std::fs::OpenOptions::new().write(true).truncate(true).open(&spare) {
                Ok(file) => file,
                // Cleared by another process starting up: the next one, or a new file.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            std::io::Write::write_all(&mut file, text)?;
            file.sync_all()?;
            return match std::fs::rename(&spare, path) {
                Ok(()) => sync_dir(&self.dir),
                Err(e) if e.kind() == io::ErrorKind::NotFound => write_atomic(path, text, owner),
                Err(e) => Err(e),
            };
        }
    }

    pub fn with_pause_after_first_rename(self, pause: Option<std::time::Duration>) -> Self {
        Self { pause_after_first_rename: pause, ..self }
    }

    fn manifest_path(&self, publish_id: Uuid) -> PathBuf {
        self.dir.join(format!("{publish_id}.json"))
    }

    /// Writes every file under a temporary name beside its destination
    /// (`root` is the workspace root), then the manifest that lists them.
    pub fn stage(&self, scope: PublishScope, root: &Path, changes: FileChanges) -> io::Result<Manifest> {
        let publish_id = Uuid::new_v4();
        let mut entries = Vec::with_capacity(changes.edits.len());
        let mut staged_files = Vec::new();
        let mut bytes_delta = 0i64;
        for (path, content) in changes.edits {
            let dest = confine(root, &path).map_err(io::Error::other)?;
            let replaced = match std::fs::metadata(&dest) {
                Ok(meta) if meta.is_file() => meta.len() as i64,
                Ok(_) => 0,
                Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
                Err(e) => return Err(e),
            };
            bytes_delta += content.as_ref().map_or(0, |bytes| bytes.len() as i64) - replaced;
            let staged = match content {
                Some(bytes) => {
                    let file = stage(&dest, &bytes, scope.job_id)?;
                    let name = file.staged_name();
                    staged_files.push(file);
                    Some(name)
                }
                None => None,
            };
            entries.push(ManifestEntry { path, staged });
        }
        let manifest = Manifest { publish_id, scope, root: root.to_owned(), entries, bytes_delta };
        self.record(&manifest, staged_files)?;
        Ok(manifest)
    }

    /// A publish staged a file at a time, from readers: an import's files,
    /// too many and too big to hold in memory at once.
    pub fn begin(&self, scope: PublishScope, root: &Path) -> Staging<'_> {
        Staging { publisher: self, scope, root: root.to_owned(), entries: Vec::new(), files: Vec::new(), bytes: 0 }
    }

    fn record(&self, manifest: &Manifest, staged_files: Vec<StagedFile>) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let text = serde_json::to_vec(manifest).map_err(io::Error::other)?;
        self.write_manifest(&self.manifest_path(manifest.publish_id), &text, manifest.scope.job_id)?;
        // From here the manifest owns the staged files: apply or discard removes them.
        for file in staged_files {
            file.keep()?;
        }
        Ok(())
    }

    /// The manifests of publishes not yet finished (by any process).
    pub fn pending(&self) -> io::Result<Vec<Manifest>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut manifests = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match std::fs::read(&path) {
                Ok(bytes) => match serde_json::from_slice(&bytes) {
                    Ok(manifest) => manifests.push(manifest),
                    Err(e) => tracing::warn!(path = %path.display(), error = %e, "an unreadable publish manifest"),
                },
                // Finished by another process meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(manifests)
    }

    /// Takes a finished manifest out of the pending ones: moved aside to be
    /// written over, or removed when enough are spare. Gone already: another
    /// process finished it.
    fn forget(&self, publish_id: Uuid) -> io::Result<()> {
        let path = self.manifest_path(publish_id);
        let keep = self.spares.lock().expect("the spares' lock is never poisoned").len() < MOST_SPARES;
        if keep {
            let spare = self.spare_dir().join(format!("{publish_id}"));
            let moved = match std::fs::rename(&path, &spare) {
                // The spare folder is missing, or the manifest is gone.
                Err(e) if e.kind() == io::ErrorKind::NotFound && path.exists() => {
                    std::fs::create_dir_all(self.spare_dir())?;
                    std::fs::rename(&path, &spare)
                }
                moved => moved,
            };
            match moved {
                Ok(()) => {
                    // Emptied: the paths a manifest names (a rollout summary's
                    // slug) must not outlive a forget of them.
                    std::fs::OpenOptions::new().write(true).open(&spare)?.set_len(0)?;
                    self.spares.lock().expect("the spares' lock is never poisoned").push(spare)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        } else {
            remove_if_present(&path)?;
        }
        match sync_dir(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A publish being staged a file at a time; its files are removed if it is
/// dropped before [`Staging::finish`].
pub struct Staging<'p> {
    publisher: &'p Publisher,
    scope: PublishScope,
    root: PathBuf,
    entries: Vec<ManifestEntry>,
    files: Vec<StagedFile>,
    bytes: i64,
}

impl Staging<'_> {
    /// Stages `path` (relative to the workspace root, through the one
    /// confinement function) with what `content` holds; the bytes written.
    pub fn add(&mut self, path: &str, content: &mut dyn std::io::Read) -> io::Result<u64> {
        let dest = confine(&self.root, path).map_err(io::Error::other)?;
        let (file, written) = stage_from(&dest, content, self.scope.job_id)?;
        self.entries.push(ManifestEntry { path: path.to_owned(), staged: Some(file.staged_name()) });
        self.files.push(file);
        self.bytes += written as i64;
        Ok(written)
    }

    /// The manifest that lists every staged file, written: the publish may
    /// now be recorded and applied like any other.
    pub fn finish(self) -> io::Result<Manifest> {
        let manifest = Manifest {
            publish_id: Uuid::new_v4(),
            scope: self.scope,
            root: self.root,
            entries: self.entries,
            bytes_delta: self.bytes,
        };
        self.publisher.record(&manifest, self.files)?;
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> PublishScope {
        PublishScope {
            job_id: Uuid::new_v4(),
            tenant: Uuid::nil(),
            workspace: "default".into(),
            layout: "default".into(),
        }
    }

    fn fixture() -> (tempfile::TempDir, PathBuf, Publisher) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("memories")).unwrap();
        std::fs::write(root.join("memories/MEMORY.md"), "old memory").unwrap();
        std::fs::write(root.join("memories/gone.md"), "to delete").unwrap();
        let publisher = Publisher::new(&dir.path().join("data"));
        (dir, root, publisher)
    }

    fn changes() -> FileChanges {
        let mut changes = FileChanges::default();
        changes.write("memories/MEMORY.md".into(), "new memory");
        changes.write("memories/skills/new/SKILL.md".into(), "skill");
        changes.delete("memories/gone.md".into());
        changes
    }

    #[test]
    fn staged_files_are_invisible_until_applied() {
        let (_dir, root, publisher) = fixture();
        let manifest = publisher.stage(scope(), &root, changes()).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "old memory");
        assert!(root.join("memories/gone.md").exists());
        assert!(!root.join("memories/skills/new/SKILL.md").exists());
        assert_eq!(publisher.pending().unwrap().len(), 1);
        // A crash here leaves the manifest; whoever finds it finishes it the same way.
        let found = publisher.pending().unwrap().remove(0);
        found.apply(&publisher).unwrap();
        manifest.apply(&publisher).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "new memory");
        assert_eq!(std::fs::read_to_string(root.join("memories/skills/new/SKILL.md")).unwrap(), "skill");
        assert!(!root.join("memories/gone.md").exists());
        assert!(publisher.pending().unwrap().is_empty());
        assert!(crate::workspace::find_leftovers(&root).unwrap().is_empty());
    }

    #[test]
    fn a_publish_cut_off_midway_is_completed() {
        let (_dir, root, publisher) = fixture();
        let manifest = publisher.stage(scope(), &root, changes()).unwrap();
        // The process died after its first rename.
        let first = manifest.staged_files().remove(0);
        std::fs::rename(&first, root.join("memories/MEMORY.md")).unwrap();
        let found = publisher.pending().unwrap().remove(0);
        found.apply(&publisher).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "new memory");
        assert_eq!(std::fs::read_to_string(root.join("memories/skills/new/SKILL.md")).unwrap(), "skill");
        assert!(!root.join("memories/gone.md").exists());
        assert!(publisher.pending().unwrap().is_empty());
    }

    #[test]
    fn a_discarded_publish_leaves_nothing() {
        let (_dir, root, publisher) = fixture();
        let manifest = publisher.stage(scope(), &root, changes()).unwrap();
        assert_eq!(manifest.staged_files().len(), 2);
        manifest.discard(&publisher).unwrap();
        manifest.discard(&publisher).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "old memory");
        assert!(root.join("memories/gone.md").exists());
        assert!(publisher.pending().unwrap().is_empty());
        assert!(crate::workspace::find_leftovers(&root).unwrap().is_empty());
    }

    /// A finished manifest's file is written over by the next publish (the
    /// same inode, no new file), never listed as pending, and the spares of
    /// an earlier life are cleared at start-up.
    #[test]
    fn finished_manifests_are_written_over_not_recreated() {
        use std::os::unix::fs::MetadataExt;
        let (_dir, root, publisher) = fixture();
        let first = publisher.stage(scope(), &root, changes()).unwrap();
        let inode = std::fs::metadata(publisher.manifest_path(first.publish_id)).unwrap().ino();
        first.apply(&publisher).unwrap();
        assert!(publisher.pending().unwrap().is_empty(), "a spare is not pending");
        let spare = publisher.spare_dir().join(first.publish_id.to_string());
        assert_eq!(std::fs::metadata(&spare).unwrap().len(), 0, "and keeps nothing of what it listed");
        // Another process finishing the same manifest finds it gone.
        first.apply(&publisher).unwrap();
        let mut again = FileChanges::default();
        again.write("memories/MEMORY.md".into(), "newer memory");
        let second = publisher.stage(scope(), &root, again).unwrap();
        let path = publisher.manifest_path(second.publish_id);
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the spare was written over");
        let pending = publisher.pending().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].publish_id, second.publish_id, "with the new manifest's content only");
        second.apply(&publisher).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "newer memory");

        // A spare cleared by another process's start-up: a new file instead.
        publisher.clear_spares().unwrap();
        let mut third = FileChanges::default();
        third.write("memories/MEMORY.md".into(), "newest memory");
        let third = publisher.stage(scope(), &root, third).unwrap();
        assert_eq!(publisher.pending().unwrap()[0].publish_id, third.publish_id);
        third.apply(&publisher).unwrap();
        assert!(publisher.pending().unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "newest memory");
    }

    /// A writer that stalled while another process completed its publish,
    /// and a later run wrote a file this one deletes, stops when it wakes:
    /// the later run's file stays.
    #[test]
    fn a_writer_that_wakes_late_does_not_undo_a_later_run() {
        let (_dir, root, publisher) = fixture();
        let stalled = publisher.stage(scope(), &root, changes()).unwrap();
        publisher.pending().unwrap().remove(0).apply(&publisher).unwrap();
        assert!(!root.join("memories/gone.md").exists());
        let mut later = FileChanges::default();
        later.write("memories/gone.md".into(), "written again");
        publisher.stage(scope(), &root, later).unwrap().apply(&publisher).unwrap();
        stalled.apply(&publisher).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("memories/gone.md")).unwrap(), "written again");
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "new memory");
    }

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        let (_dir, root, publisher) = fixture();
        let mut changes = FileChanges::default();
        changes.write("../escape.md".into(), "x");
        assert!(publisher.stage(scope(), &root, changes).is_err());
        assert!(!root.parent().unwrap().join("escape.md").exists());
    }
}
