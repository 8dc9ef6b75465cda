//! The passages of a layout's memory files, with what ranking needs of each
//! (its words counted, its digest), cut once per version of a file: a cache
//! keyed by the file's path and checked against its length, modification
//! time and inode, so a query re-reads only what a publish changed. What
//! the cache holds is bounded by its weight (SPEC §2.10 "Search by meaning").

use super::read::{EntryKind, ReadError, decoded, entries_under};
use crate::domain::passages::{Passage, cut, is_ranked};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use unicode_segmentation::UnicodeSegmentation;

/// The memory text one query ranks at most; files past it are not read.
pub const MAX_RANKED_BYTES: usize = 16 << 20;
/// What the cache of cut files holds at most (its texts and word counts).
const CACHE_BYTES: u64 = 256 << 20;

/// A passage, its words counted.
#[derive(Debug)]
pub struct IndexedPassage {
    pub passage: Passage,
    /// The SHA-256 of its ranked text: what its vector is stored under.
    pub digest: String,
    /// Each word's count.
    pub words: HashMap<String, u32>,
    /// Its words in all.
    pub length: u32,
}

/// A file's passages as one version of it holds them.
#[derive(Debug)]
pub struct FilePassages {
    version: (u64, i64, i64, u64),
    pub passages: Vec<IndexedPassage>,
    weight: u32,
}

/// Cut files, shared by every query of this process.
#[derive(Clone)]
pub struct PassageCache(moka::sync::Cache<PathBuf, Arc<FilePassages>>);

impl Default for PassageCache {
    fn default() -> Self {
        Self(
            moka::sync::Cache::builder().max_capacity(CACHE_BYTES).weigher(|_, f: &Arc<FilePassages>| f.weight).build(),
        )
    }
}

/// A text's words, case-folded.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.unicode_words().map(str::to_lowercase)
}

/// `text`'s passages, each with its words counted and its digest.
pub fn index_text(text: &str) -> Vec<IndexedPassage> {
    cut(text)
        .into_iter()
        .map(|passage| {
            let (mut counts, mut length) = (HashMap::new(), 0u32);
            for word in words(&passage.ranked_text) {
                *counts.entry(word).or_insert(0u32) += 1;
                length += 1;
            }
            let digest = crate::domain::passages::digest(&passage);
            IndexedPassage { passage, digest, words: counts, length }
        })
        .collect()
}

/// The ranked files under `dir` (`""`: all) with their passages, in path
/// order, as far as [`MAX_RANKED_BYTES`] of text reaches.
pub fn layout_passages(
    cache: Option<&PassageCache>,
    memory_root: &Path,
    dir: &str,
) -> Result<Vec<(String, Arc<FilePassages>)>, ReadError> {
    let mut files = Vec::new();
    let mut held = 0usize;
    for entry in entries_under(memory_root, dir, false)? {
        if entry.kind != EntryKind::File || !is_ranked(&entry.path) || held >= MAX_RANKED_BYTES {
            continue;
        }
        let Ok(file) = file_passages(cache, &memory_root.join(&entry.path), MAX_RANKED_BYTES - held) else {
            continue;
        };
        held += file.version.0 as usize;
        files.push((entry.path, file));
    }
    Ok(files)
}

/// One file's passages: from the cache while it is the same version (a
/// `stat`, no open: a query over a thousand unchanged files opens none).
fn file_passages(cache: Option<&PassageCache>, path: &Path, max: usize) -> std::io::Result<Arc<FilePassages>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    let version = (meta.len().min(max as u64), meta.mtime(), meta.mtime_nsec(), meta.ino());
    if let Some(cached) = cache.and_then(|c| c.0.get(path)).filter(|c| c.version == version) {
        return Ok(cached);
    }
    let mut file = std::fs::File::open(path)?;
    let opened = file.metadata()?;
    let mut bytes = Vec::new();
    file.by_ref().take(max as u64).read_to_end(&mut bytes)?;
    let passages = index_text(&decoded(&bytes));
    let words: usize = passages.iter().map(|p| p.words.keys().map(|w| w.len() + 32).sum::<usize>()).sum();
    let weight = u32::try_from(2 * bytes.len() + words).unwrap_or(u32::MAX);
    let read = (bytes.len() as u64, opened.mtime(), opened.mtime_nsec(), opened.ino());
    let indexed = Arc::new(FilePassages { version: read, passages, weight });
    // Cached only when what was read is the version that was stat'ed.
    if let Some(cache) = cache
        && read == version
    {
        cache.0.insert(path.to_owned(), indexed.clone());
    }
    Ok(indexed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_cut_again_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("MEMORY.md"), "# Task Group: ci\n## Task 1: runner\n- pin the runner\n").unwrap();
        std::fs::write(root.join("notes.txt"), "not ranked\n").unwrap();
        let cache = PassageCache::default();
        let first = layout_passages(Some(&cache), root, "").unwrap();
        assert_eq!(first.len(), 1, "only ranked files");
        let again = layout_passages(Some(&cache), root, "").unwrap();
        assert!(Arc::ptr_eq(&first[0].1, &again[0].1), "the same version comes from the cache");
        let passage = &again[0].1.passages[0];
        assert_eq!((passage.words["runner"], passage.length), (2, 9));
        std::fs::write(root.join("MEMORY.md.new"), "## Task 2: cache\n- bump the key\n").unwrap();
        std::fs::rename(root.join("MEMORY.md.new"), root.join("MEMORY.md")).unwrap();
        let changed = layout_passages(Some(&cache), root, "").unwrap();
        assert_eq!(changed[0].1.passages[0].passage.heading, "Task 2: cache", "a publish's rename is seen");
        assert_ne!(changed[0].1.passages[0].digest, passage.digest);
    }
}
