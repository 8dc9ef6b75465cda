//! The redaction of an import's files as they are placed (SPEC §2.7, §4).

use crate::domain::layout::{StoredLayout, ValidLayout};
use crate::domain::portability::{Placement, placement};
use crate::domain::redact::{Counts, Redactor};
use std::io::{self, BufRead, BufReader, Read};

/// How an entry's text is matched.
pub(super) enum Lines {
    /// JSON lines: escaped strings matched decoded.
    Json,
    Text,
}

/// The rules a placed file is redacted with, if any: a memory file's
/// layout's, a conversation's only where its layout redacts at ingest.
pub(super) fn redaction_of(path: &str, layouts: &[StoredLayout]) -> Option<(std::sync::Arc<Redactor>, Lines)> {
    let owner = |dir: fn(&ValidLayout) -> &str| {
        layouts.iter().find(|l| path.strip_prefix(dir(&l.layout)).is_some_and(|rest| rest.starts_with('/')))
    };
    let (redactor, lines) = match placement(path, layouts) {
        Placement::Rollout { .. } => {
            let layout = owner(|l| l.sessions_dir.normalized.as_str())?;
            (layout.layout.config.redaction.at_ingest.then(|| layout.layout.redactor())?, Lines::Json)
        }
        _ => (owner(|l| l.memories_dir.normalized.as_str())?.layout.redactor(), Lines::Text),
    };
    (!redactor.is_off()).then_some((redactor, lines))
}

/// A reader that yields its source's lines redacted, one at a time: a file
/// too large to hold, or JSON lines, each redacted on its own.
pub(super) struct LineRedactor<'a, R: Read> {
    source: BufReader<&'a mut R>,
    redactor: &'a Redactor,
    json: bool,
    counts: &'a mut Counts,
    pending: Vec<u8>,
    at: usize,
}

impl<'a, R: Read> LineRedactor<'a, R> {
    pub(super) fn new(source: &'a mut R, redactor: &'a Redactor, json: bool, counts: &'a mut Counts) -> Self {
        Self { source: BufReader::new(source), redactor, json, counts, pending: Vec::new(), at: 0 }
    }
}

impl<R: Read> Read for LineRedactor<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.pending.len() {
            let mut line = Vec::new();
            if self.source.read_until(b'\n', &mut line)? == 0 {
                return Ok(0);
            }
            self.pending = match String::from_utf8(line) {
                Ok(text) if self.json => self.redactor.redact_jsonl(&text, self.counts).into_bytes(),
                Ok(text) => self.redactor.redact_text(&text, self.counts).into_bytes(),
                Err(not_text) => not_text.into_bytes(),
            };
            self.at = 0;
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
