//! Ranking a memory folder's passages by relevance to a query (SPEC §2.10
//! "Search by meaning", `mode=ranked`): BM25 over words — Unicode word
//! boundaries, case-folded, no stemming — so search by relevance needs no
//! model. Exact: every passage of the layout's searched files is scored for
//! each query (a workspace's memory is megabytes, not gigabytes), and what a
//! query holds is bounded by [`MAX_RANKED_BYTES`].

use super::read::{EntryKind, ReadError, decoded, entries_under};
use crate::domain::passages::{Passage, cut};
use std::collections::HashMap;
use std::path::Path;
use unicode_segmentation::UnicodeSegmentation;

/// The memory text one query ranks at most; files past it are not read.
pub const MAX_RANKED_BYTES: usize = 16 << 20;
/// BM25's term-frequency saturation and length normalisation (the usual values).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A passage of a file, and how well it answers the query.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub path: String,
    pub passage: Passage,
    pub score: f64,
}

/// The files ranked: the memory the agent reads — `MEMORY.md`,
/// `memory_summary.md`, rollout summaries and skills — not the raw memories
/// and the selection, which consolidation reads.
fn is_ranked(path: &str) -> bool {
    matches!(path, "MEMORY.md" | "memory_summary.md")
        || (path.starts_with("rollout_summaries/") && path.ends_with(".md"))
        || (path.starts_with("skills/") && path.ends_with(".md"))
}

/// The passages under `dir` (a folder or a file; `""`: all) ranked for
/// `query`, best first; a passage that holds none of its words is left out.
pub fn rank(memory_root: &Path, dir: &str, query: &str, max_words: usize) -> Result<Vec<Scored>, ReadError> {
    let terms: Vec<String> = {
        let mut terms: Vec<String> = Vec::new();
        for word in words(query) {
            if terms.len() == max_words {
                break;
            }
            if !terms.contains(&word) {
                terms.push(word);
            }
        }
        terms
    };
    if terms.is_empty() {
        return Err(ReadError::Invalid("query holds no word to rank by.".into()));
    }
    let mut passages = Vec::new();
    let mut held = 0;
    for entry in entries_under(memory_root, dir, false)? {
        if entry.kind != EntryKind::File || !is_ranked(&entry.path) || held >= MAX_RANKED_BYTES {
            continue;
        }
        let Ok(bytes) = read_at_most(&memory_root.join(&entry.path), MAX_RANKED_BYTES - held) else { continue };
        held += bytes.len();
        passages.extend(cut(&decoded(&bytes)).into_iter().map(|p| (entry.path.clone(), p)));
    }
    let texts: Vec<&str> = passages.iter().map(|(_, p)| p.ranked_text.as_str()).collect();
    let scores = bm25(&terms, &texts);
    let mut scored: Vec<Scored> = passages
        .into_iter()
        .zip(scores)
        .filter(|(_, score)| *score > 0.0)
        .map(|((path, passage), score)| Scored { path, passage, score })
        .collect();
    scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| order(a).cmp(&order(b))));
    Ok(scored)
}

/// A file's first `max` bytes at most.
fn read_at_most(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max as u64).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Ties go in the substring search's file order, then by line.
fn order(s: &Scored) -> (u8, &str, u64) {
    let rank = match s.path.as_str() {
        "MEMORY.md" => 0,
        "memory_summary.md" => 1,
        _ => 2,
    };
    (rank, s.path.as_str(), s.passage.line)
}

/// A text's words, case-folded.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.unicode_words().map(str::to_lowercase)
}

/// The BM25 score of each of `documents` for the (distinct) `terms`.
pub fn bm25(terms: &[String], documents: &[&str]) -> Vec<f64> {
    let index: HashMap<&str, usize> = terms.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let mut frequencies: Vec<(Vec<u32>, usize)> = Vec::with_capacity(documents.len());
    let mut holding = vec![0usize; terms.len()];
    for document in documents {
        let (mut tf, mut length) = (vec![0u32; terms.len()], 0usize);
        for word in words(document) {
            length += 1;
            if let Some(i) = index.get(word.as_str()) {
                tf[*i] += 1;
            }
        }
        for (i, n) in tf.iter().enumerate() {
            holding[i] += usize::from(*n > 0);
        }
        frequencies.push((tf, length));
    }
    let count = documents.len() as f64;
    let average = frequencies.iter().map(|(_, l)| *l as f64).sum::<f64>() / count.max(1.0);
    let idf: Vec<f64> = holding.iter().map(|df| (1.0 + (count - *df as f64 + 0.5) / (*df as f64 + 0.5)).ln()).collect();
    frequencies
        .iter()
        .map(|(tf, length)| {
            let norm = K1 * (1.0 - B + B * *length as f64 / average.max(1.0));
            tf.iter().zip(&idf).map(|(f, idf)| idf * (*f as f64 * (K1 + 1.0)) / (*f as f64 + norm)).sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(query: &str) -> Vec<String> {
        let mut t: Vec<String> = words(query).collect();
        t.sort();
        t.dedup();
        t
    }

    #[test]
    fn words_are_unicode_and_case_folded() {
        let said: Vec<String> = words("Pin the CI-runner's İmage, ünïcode 24.04!").collect();
        assert_eq!(said, ["pin", "the", "ci", "runner's", "i̇mage", "ünïcode", "24.04"]);
    }

    #[test]
    fn rarer_and_more_frequent_words_rank_higher() {
        let docs = ["the cat sat", "the dog sat on the dog", "the the the", "a bird"];
        let scores = bm25(&terms("dog"), &docs);
        assert!(scores[1] > 0.0 && scores[0] == 0.0 && scores[2] == 0.0 && scores[3] == 0.0);
        let both = bm25(&terms("the dog"), &docs);
        assert!(both[1] > both[0] && both[1] > both[2], "{both:?}");
        let idf_weighs = bm25(&terms("cat the"), &docs);
        assert!(idf_weighs[0] > idf_weighs[2], "a rare word outweighs a common one: {idf_weighs:?}");
        assert!(bm25(&terms("x"), &[]).is_empty());
    }

    #[test]
    fn a_folder_ranks_its_task_sections_best_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("rollout_summaries")).unwrap();
        std::fs::create_dir_all(root.join("raw_memories")).unwrap();
        let memory = "# Task Group: ci\n## Task 1: runner\n- pin the runner image\n## Task 2: packages\n- the package manager is pnpm, not npm\n";
        std::fs::write(root.join("MEMORY.md"), memory).unwrap();
        std::fs::write(root.join("rollout_summaries/r1_x.md"), "# Summary\nthe user prefers pnpm as package manager\n")
            .unwrap();
        std::fs::write(root.join("raw_memories/r1.md"), "package manager package manager pnpm\n").unwrap();
        let ranked = rank(root, "", "which package manager", 64).unwrap();
        let mut found: Vec<(&str, u64)> = ranked.iter().map(|s| (s.path.as_str(), s.passage.line)).collect();
        assert!(ranked[0].score >= ranked[1].score, "best first");
        found.sort();
        assert_eq!(found, [("MEMORY.md", 4), ("rollout_summaries/r1_x.md", 1)], "raw memories are not ranked");
        assert!(rank(root, "", "runner", 64).unwrap()[0].passage.heading.ends_with("Task 1: runner"));
        assert!(matches!(rank(root, "", "  !? ", 64), Err(ReadError::Invalid(_))));
    }
}
