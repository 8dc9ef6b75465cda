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
    /// an earlier try.
    pub fn apply(&self, publisher: &Publisher) -> io::Result<()> {
        let mut dirs = BTreeSet::new();
        for (n, entry) in self.entries.iter().enumerate() {
            if n == 1
                && let Some(pause) = publisher.pause_after_first_rename
            {
                std::thread::sleep(pause);
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

/// `<data_dir>/publish`: the manifests of publishes under way.
#[derive(Debug, Clone)]
pub struct Publisher {
    dir: PathBuf,
    /// A test hook: every publish stops this long after its first rename,
    /// so that a test can read in the middle of one.
    pause_after_first_rename: Option<std::time::Duration>,
}

impl Publisher {
    pub fn new(data_dir: &Path) -> Self {
        Self { dir: data_dir.join("publish"), pause_after_first_rename: None }
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
        write_atomic(&self.manifest_path(manifest.publish_id), &text, manifest.scope.job_id)?;
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

    fn forget(&self, publish_id: Uuid) -> io::Result<()> {
        remove_if_present(&self.manifest_path(publish_id))?;
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

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        let (_dir, root, publisher) = fixture();
        let mut changes = FileChanges::default();
        changes.write("../escape.md".into(), "x");
        assert!(publisher.stage(scope(), &root, changes).is_err());
        assert!(!root.parent().unwrap().join("escape.md").exists());
    }
}
