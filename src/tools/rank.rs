//! Ranking a memory folder's passages by relevance to a query (SPEC §2.10
//! "Search by meaning"): `ranked` is BM25 over words — Unicode word
//! boundaries, case-folded, no stemming — so search by relevance needs no
//! model; `semantic` is the cosine of embeddings; `hybrid` fuses the two by
//! reciprocal rank. Exact: every passage of the layout's searched files is
//! scored for each query (a workspace's memory is megabytes, not gigabytes;
//! what a query reads is bounded by [`MAX_RANKED_BYTES`]).

use super::passage_index::{FilePassages, IndexedPassage};
pub use super::passage_index::{MAX_RANKED_BYTES, words};
use crate::domain::passages::Passage;
use std::collections::HashMap;
use std::sync::Arc;

/// BM25's term-frequency saturation and length normalisation (the usual values).
const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Reciprocal rank fusion's constant (the value of its paper, Cormack et al. 2009).
const RRF_K: f64 = 60.0;

/// A passage of a file, and how well it answers the query.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored<'a> {
    pub path: &'a str,
    pub passage: &'a Passage,
    pub score: f64,
}

/// The passages of the files searched, in file order.
pub struct Candidates<'a> {
    all: Vec<(&'a str, &'a IndexedPassage)>,
}

impl<'a> Candidates<'a> {
    pub fn of(files: &'a [(String, Arc<FilePassages>)]) -> Self {
        Self { all: files.iter().flat_map(|(path, f)| f.passages.iter().map(move |p| (path.as_str(), p))).collect() }
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(&'a str, &'a IndexedPassage)> {
        self.all.iter()
    }

    /// The passages with a score above zero, in no order (see [`best`]).
    fn scored(&self, scores: &[f64]) -> Vec<Scored<'a>> {
        self.all
            .iter()
            .zip(scores)
            .filter(|(_, score)| **score > 0.0)
            .map(|((path, p), score)| Scored { path, passage: &p.passage, score: *score })
            .collect()
    }

    /// BM25 for the query's words; a passage holding none of them is left
    /// out. One lookup of each word in each passage.
    pub fn by_words(&self, terms: &[String]) -> Vec<Scored<'a>> {
        let count = self.all.len() as f64;
        let average = self.all.iter().map(|(_, p)| p.length as f64).sum::<f64>() / count.max(1.0);
        let counts: Vec<u32> =
            self.all.iter().flat_map(|(_, p)| terms.iter().map(|t| p.words.get(t).copied().unwrap_or(0))).collect();
        let idf: Vec<f64> = (0..terms.len())
            .map(|i| {
                let df = counts.iter().skip(i).step_by(terms.len().max(1)).filter(|n| **n > 0).count() as f64;
                (1.0 + (count - df + 0.5) / (df + 0.5)).ln()
            })
            .collect();
        let scores: Vec<f64> = self
            .all
            .iter()
            .zip(counts.chunks(terms.len().max(1)))
            .map(|((_, p), tf)| {
                let norm = K1 * (1.0 - B + B * p.length as f64 / average.max(1.0));
                tf.iter().zip(&idf).map(|(f, idf)| idf * (*f as f64 * (K1 + 1.0)) / (*f as f64 + norm)).sum()
            })
            .collect();
        self.scored(&scores)
    }

    /// Each passage's vector (by its digest), in the passages' order;
    /// `None` where it has none yet.
    pub fn vectors<'v>(&self, by_digest: &'v HashMap<String, Arc<[f32]>>) -> Vec<Option<&'v [f32]>> {
        self.all.iter().map(|(_, p)| by_digest.get(&p.digest).map(|v| &**v)).collect()
    }

    /// The cosine of each passage's vector (as [`Self::vectors`] gives
    /// them) with the query's; passages without a vector are left out.
    pub fn by_vector(&self, query: &[f32], vectors: &[Option<&[f32]>]) -> Vec<Scored<'a>> {
        let scores: Vec<f64> =
            vectors.iter().map(|v| v.map_or(0.0, |v| dot(query, v).max(f64::MIN_POSITIVE))).collect();
        self.scored(&scores)
    }
}

/// The query's first `max_words` distinct words; an error when it has none.
pub fn query_terms(query: &str, max_words: usize) -> Result<Vec<String>, String> {
    let mut terms: Vec<String> = Vec::new();
    for word in words(query) {
        if terms.len() == max_words {
            break;
        }
        if !terms.contains(&word) {
            terms.push(word);
        }
    }
    if terms.is_empty() {
        return Err("query holds no word to rank by.".into());
    }
    Ok(terms)
}

/// The `keep` best of `scored`, best first (ties in the substring search's
/// file order, then by line); only they are sorted.
pub fn best(mut scored: Vec<Scored<'_>>, keep: usize) -> Vec<Scored<'_>> {
    let by_rank = |a: &Scored, b: &Scored| b.score.total_cmp(&a.score).then_with(|| order(a).cmp(&order(b)));
    if keep == 0 {
        return Vec::new();
    }
    if keep < scored.len() {
        scored.select_nth_unstable_by(keep - 1, by_rank);
        scored.truncate(keep);
    }
    scored.sort_by(by_rank);
    scored
}

/// How deep into each ranking a fusion looks: a passage past it adds less
/// than `1 / (k + FUSION_DEPTH)`, under a sixteenth of a first place.
pub const FUSION_DEPTH: usize = 1000;

/// Rankings fused: each passage scores the sum of `1 / (k + rank)` over
/// the rankings whose first `depth` it is in (in no order: see [`best`]).
pub fn fuse<'a>(rankings: Vec<Vec<Scored<'a>>>, depth: usize) -> Vec<Scored<'a>> {
    let mut fused: Vec<Scored<'a>> = Vec::new();
    let mut at: HashMap<(&'a str, u64), usize> = HashMap::new();
    for ranking in rankings {
        let ranking = best(ranking, depth);
        for (rank, s) in ranking.iter().enumerate() {
            let add = 1.0 / (RRF_K + rank as f64 + 1.0);
            match at.get(&(s.path, s.passage.line)) {
                Some(i) => fused[*i].score += add,
                None => {
                    at.insert((s.path, s.passage.line), fused.len());
                    fused.push(Scored { score: add, ..s.clone() });
                }
            }
        }
    }
    fused
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() as f64
}

/// Ties go in the substring search's file order, then by line.
fn order<'a>(s: &Scored<'a>) -> (u8, &'a str, u64) {
    let rank = match s.path {
        "MEMORY.md" => 0,
        "memory_summary.md" => 1,
        _ => 2,
    };
    (rank, s.path, s.passage.line)
}

#[cfg(test)]
mod tests {
    use super::super::passage_index::{PassageCache, index_text, layout_passages};
    use super::*;

    fn bm25(query: &str, docs: &[&str]) -> Vec<f64> {
        let files: Vec<(String, Arc<FilePassages>)> =
            docs.iter().enumerate().map(|(i, d)| (format!("skills/{i}.md"), file_of(d))).collect();
        let ranked = best(Candidates::of(&files).by_words(&query_terms(query, 64).unwrap()), usize::MAX);
        files.iter().map(|(path, _)| ranked.iter().find(|s| s.path == path).map_or(0.0, |s| s.score)).collect()
    }

    fn file_of(text: &str) -> Arc<FilePassages> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("MEMORY.md"), text).unwrap();
        let mut files = layout_passages(None, dir.path(), "").unwrap();
        assert_eq!(files[0].1.passages.len(), index_text(text).len());
        files.remove(0).1
    }

    #[test]
    fn words_are_unicode_and_case_folded() {
        let said: Vec<String> = words("Pin the CI-runner's İmage, ünïcode 24.04!").collect();
        assert_eq!(said, ["pin", "the", "ci", "runner's", "i̇mage", "ünïcode", "24.04"]);
        assert_eq!(query_terms("a b a c", 2).unwrap(), ["a", "b"]);
        assert!(query_terms("  !? ", 64).is_err());
    }

    #[test]
    fn rarer_and_more_frequent_words_rank_higher() {
        let docs = ["the cat sat", "the dog sat on the dog", "the the the", "a bird"];
        let scores = bm25("dog", &docs);
        assert!(scores[1] > 0.0 && scores[0] == 0.0 && scores[2] == 0.0 && scores[3] == 0.0);
        let both = bm25("the dog", &docs);
        assert!(both[1] > both[0] && both[1] > both[2], "{both:?}");
        let idf_weighs = bm25("cat the", &docs);
        assert!(idf_weighs[0] > idf_weighs[2], "a rare word outweighs a common one: {idf_weighs:?}");
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
        let files = layout_passages(Some(&PassageCache::default()), root, "").unwrap();
        let ranked = best(Candidates::of(&files).by_words(&query_terms("which package manager", 64).unwrap()), 9);
        let mut found: Vec<(&str, u64)> = ranked.iter().map(|s| (s.path, s.passage.line)).collect();
        assert!(ranked[0].score >= ranked[1].score, "best first");
        found.sort();
        assert_eq!(found, [("MEMORY.md", 4), ("rollout_summaries/r1_x.md", 1)], "raw memories are not ranked");
        let runner = best(Candidates::of(&files).by_words(&query_terms("runner", 64).unwrap()), 1);
        assert!(runner[0].passage.heading.ends_with("Task 1: runner"));
    }

    #[test]
    fn vectors_rank_by_cosine_and_fusion_rewards_agreement() {
        let files = vec![("MEMORY.md".to_owned(), file_of("## A\nalpha\n## B\nbeta\n## C\ngamma\n"))];
        let candidates = Candidates::of(&files);
        let digests: Vec<String> = candidates.iter().map(|(_, p)| p.digest.clone()).collect();
        let vectors: HashMap<String, Arc<[f32]>> =
            [(digests[0].clone(), Arc::from(vec![1.0f32, 0.0])), (digests[1].clone(), Arc::from(vec![0.6f32, 0.8]))]
                .into_iter()
                .collect();
        let semantic = best(candidates.by_vector(&[0.0, 1.0], &candidates.vectors(&vectors)), 9);
        let headings: Vec<&str> = semantic.iter().map(|s| s.passage.heading.as_str()).collect();
        assert_eq!(headings, ["B", "A"], "C has no vector; A's cosine is 0 but it has one");
        let words = candidates.by_words(&query_terms("alpha", 8).unwrap());
        let fused = best(fuse(vec![words, semantic], FUSION_DEPTH), 9);
        assert_eq!(fused[0].passage.heading, "A", "in both rankings: {fused:?}");
        assert_eq!(fused.len(), 2);
    }
}
