//! What a phase-two run changed, kept on disk outside the workspace so that a
//! failed run — or one whose process died — can be put back exactly.

use crate::workspace::{confine, write_atomic};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

const MANIFEST: &str = "manifest.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// Relative to the workspace root.
    path: String,
    /// The backup file holding the original bytes; `None`: there was no file.
    backup: Option<String>,
}

/// The originals of every file a run wrote, recorded before the first write.
#[derive(Debug)]
pub struct Snapshot {
    dir: PathBuf,
    entries: Vec<Entry>,
}

impl Snapshot {
    /// A new, empty snapshot in `dir` (which must not hold another one).
    pub fn create(dir: PathBuf) -> io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let snapshot = Self { dir, entries: Vec::new() };
        snapshot.save()?;
        Ok(snapshot)
    }

    /// The snapshot an earlier attempt left behind (it crashed), if any.
    pub fn find(dir: &Path) -> io::Result<Option<Self>> {
        match std::fs::read(dir.join(MANIFEST)) {
            Ok(bytes) => {
                let entries = serde_json::from_slice(&bytes).map_err(io::Error::other)?;
                Ok(Some(Self { dir: dir.to_path_buf(), entries }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A directory without a manifest never recorded anything.
                let _ = std::fs::remove_dir_all(dir);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn save(&self) -> io::Result<()> {
        let manifest = serde_json::to_vec(&self.entries).map_err(io::Error::other)?;
        write_atomic(&self.dir.join(MANIFEST), &manifest, uuid::Uuid::nil())
    }

    /// Keeps the current bytes of `rel` (or its absence) unless already kept.
    pub fn record(&mut self, root: &Path, rel: &str) -> io::Result<()> {
        if self.entries.iter().any(|e| e.path == rel) {
            return Ok(());
        }
        let abs = confine(root, rel).map_err(io::Error::other)?;
        let backup = match std::fs::read(&abs) {
            Ok(bytes) => {
                let name = format!("{:06}", self.entries.len());
                write_atomic(&self.dir.join(&name), &bytes, uuid::Uuid::nil())?;
                Some(name)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        self.entries.push(Entry { path: rel.to_owned(), backup });
        self.save()
    }

    /// Puts every recorded file back as it was and removes the snapshot.
    pub fn restore(self, root: &Path) -> io::Result<()> {
        for entry in self.entries.iter().rev() {
            let abs = confine(root, &entry.path).map_err(io::Error::other)?;
            match &entry.backup {
                Some(name) => write_atomic(&abs, &std::fs::read(self.dir.join(name))?, uuid::Uuid::nil())?,
                None => match std::fs::remove_file(&abs) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
        }
        self.discard()
    }

    /// The run succeeded: its changes stay.
    pub fn discard(self) -> io::Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}
