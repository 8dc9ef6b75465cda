//! A rollout in an object store (SPEC §6.1): its object's committed prefix
//! followed by its journal's lines in the database, read as one file, and
//! the rewrite that moves the journal's lines into the object.
//!
//! Every version of a rollout's object begins with the bytes of the one
//! before (a rewrite only adds lines), so the first `object_len` bytes the
//! database records are the same in any later version: a rewrite whose
//! record was lost (a crash, a lost race) leaves an object that still reads
//! correctly, and the next rewrite starts from whatever version is there.

use super::Bucket;
use crate::store::journal_records::RolloutAt;
use crate::store::{RolloutJournalStore, RolloutParts, StoreError};
use object_store::path::Path as ObjectKey;
use object_store::{GetOptions, GetRange, PutMode, PutOptions, PutPayload, UpdateVersion};

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("the rollout's path is refused: {0}")]
    Path(#[from] crate::workspace::PathError),
    #[error("the object store failed: {0}")]
    Objects(#[from] object_store::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the rollout's parts do not join up: {0}")]
    Torn(String),
    #[error("writing the rollout's copy failed: {0}")]
    Copy(#[from] std::io::Error),
}

/// The rollout's bytes from its parts: the object's first `object_len`
/// bytes (`object`), then each journal line where the one before ends, up to
/// the committed length.
pub fn joined(parts: &RolloutParts, object: Vec<u8>) -> Result<Vec<u8>, RolloutError> {
    if object.len() as u64 != parts.object_len {
        return Err(RolloutError::Torn(format!("{} bytes of an object of {}", object.len(), parts.object_len)));
    }
    let mut bytes = object;
    for (start, lines) in &parts.journal {
        if *start != bytes.len() as u64 {
            return Err(RolloutError::Torn(format!("a line at {start} after {} bytes", bytes.len())));
        }
        bytes.extend_from_slice(lines);
    }
    if bytes.len() as u64 != parts.committed_len {
        return Err(RolloutError::Torn(format!("{} bytes of {} committed", bytes.len(), parts.committed_len)));
    }
    Ok(bytes)
}

/// The journal's lines that follow the object's first `min(object_len,
/// limit)` bytes, up to `limit` bytes of rollout in all (a committed length:
/// a line boundary): none when the object holds them all.
fn journal_up_to(parts: &RolloutParts, limit: u64) -> Result<Vec<&[u8]>, RolloutError> {
    let mut written = parts.object_len.min(limit);
    let mut pieces = Vec::new();
    for (start, lines) in &parts.journal {
        if written == limit {
            break;
        }
        if *start != written {
            return Err(RolloutError::Torn(format!("a line at {start} after {written} bytes")));
        }
        let piece = &lines[..lines.len().min((limit - written) as usize)];
        pieces.push(piece);
        written += piece.len() as u64;
    }
    if written != parts.committed_len.min(limit) {
        return Err(RolloutError::Torn(format!("{written} bytes of {} committed", parts.committed_len)));
    }
    Ok(pieces)
}

impl Bucket {
    /// The rollout as one file: what was acknowledged, all of it. `None`
    /// for a rollout the database does not know (or is forgetting).
    pub async fn rollout_bytes(
        &self,
        store: &dyn RolloutJournalStore,
        at: RolloutAt<'_>,
        rollout_path: &str,
    ) -> Result<Option<Vec<u8>>, RolloutError> {
        self.rollout_prefix(store, at, rollout_path, u64::MAX).await
    }

    /// The rollout's first `limit` bytes (fewer when it is shorter): no
    /// more of its object is fetched. `None` as for [`Bucket::rollout_bytes`].
    pub async fn rollout_prefix(
        &self,
        store: &dyn RolloutJournalStore,
        at: RolloutAt<'_>,
        rollout_path: &str,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, RolloutError> {
        let Some(parts) = store.rollout_parts(at).await? else { return Ok(None) };
        let from_object = parts.object_len.min(limit);
        let mut bytes = self.object_prefix(at, rollout_path, &parts, from_object).await?;
        if bytes.len() as u64 != from_object {
            return Err(RolloutError::Torn(format!("{} bytes of an object of {}", bytes.len(), parts.object_len)));
        }
        for piece in journal_up_to(&parts, limit)? {
            bytes.extend_from_slice(piece);
        }
        Ok(Some(bytes))
    }

    /// Writes the rollout as one file to `file`, up to `limit` bytes (a
    /// committed length read earlier: a line boundary): its object streamed
    /// in pieces, then its journal's lines, so that no reader holds a whole
    /// rollout in memory. The bytes written; `None` for a rollout the
    /// database does not know (or is forgetting).
    pub async fn write_rollout(
        &self,
        store: &dyn RolloutJournalStore,
        at: RolloutAt<'_>,
        rollout_path: &str,
        limit: u64,
        file: &mut tokio::fs::File,
    ) -> Result<Option<u64>, RolloutError> {
        use tokio::io::AsyncWriteExt;
        let Some(parts) = store.rollout_parts(at).await? else { return Ok(None) };
        let from_object = parts.object_len.min(limit);
        let written = self.stream_object_prefix(at, rollout_path, &parts, from_object, file).await?;
        if written != from_object {
            return Err(RolloutError::Torn(format!("{written} bytes of an object of {}", parts.object_len)));
        }
        let pieces = journal_up_to(&parts, limit)?;
        for piece in &pieces {
            file.write_all(piece).await?;
        }
        file.flush().await?;
        Ok(Some(written + pieces.iter().map(|p| p.len() as u64).sum::<u64>()))
    }

    /// Writes the object's first `len` bytes to `file`, from this replica's
    /// copy in memory when it has the recorded version, else streamed.
    async fn stream_object_prefix(
        &self,
        at: RolloutAt<'_>,
        rollout_path: &str,
        parts: &RolloutParts,
        len: u64,
        file: &mut tokio::fs::File,
    ) -> Result<u64, RolloutError> {
        use futures_util::StreamExt;
        use tokio::io::AsyncWriteExt;
        if len == 0 {
            return Ok(0);
        }
        let key = self.url.object_key(at.tenant, at.workspace, rollout_path)?;
        if let Some(kept) = self.kept_prefix(&key, parts, len) {
            file.write_all(&kept).await?;
            return Ok(len);
        }
        let mut pieces = self.first_bytes(&key, len).await?.into_stream();
        let mut written = 0;
        while let Some(piece) = pieces.next().await {
            let piece = piece?;
            file.write_all(&piece).await?;
            written += piece.len() as u64;
        }
        Ok(written)
    }

    /// Moves the rollout's journal into its object: the object rewritten
    /// with every committed line, conditionally on the version it had, then
    /// the lines dropped from the journal. Nothing to do when the journal is
    /// empty; another replica's rewrite coming first is not an error (the
    /// lines are in the object either way). An object is never written
    /// shorter than the version it replaces. The rollout as this rewrite
    /// wrote it when it was recorded, for a reader that need not fetch it again.
    pub async fn rewrite_rollout(
        &self,
        store: &dyn RolloutJournalStore,
        at: RolloutAt<'_>,
        rollout_path: &str,
    ) -> Result<Option<Vec<u8>>, RolloutError> {
        let Some(parts) = store.rollout_parts(at).await? else { return Ok(None) };
        if parts.journal.is_empty() {
            return Ok(None);
        }
        let key = self.url.object_key(at.tenant, at.workspace, rollout_path)?;
        let bytes = joined(&parts, self.object_prefix(at, rollout_path, &parts, parts.object_len).await?)?;
        let mut written = self.put_over(&key, bytes.clone(), parts.object_etag.as_deref()).await?;
        if written.is_none() {
            // The version recorded was replaced by a rewrite whose record was
            // lost or is on its way: its bytes are committed lines too.
            let now = self.objects.head(&key).await?;
            let base = now.e_tag.ok_or_else(|| RolloutError::Torn("an object without an ETag".into()))?;
            written = if now.size >= parts.committed_len && self.begins_with(&key, &base, &bytes).await? {
                Some(base)
            } else {
                // Shorter, or not this rollout's at all (one forgotten under
                // the same id whose removal a crash cut short): replaced.
                self.put_over(&key, bytes.clone(), Some(&base)).await?
            };
        }
        let Some(etag) = written else { return Ok(None) };
        let recorded = store.rollout_rewritten(at, parts.object_etag.as_deref(), &etag, parts.committed_len).await?;
        if recorded {
            // The object at this ETag is these bytes, or begins with them
            // (another replica's rewrite, longer): the next reader's prefix.
            self.recent.keep(key.as_ref(), &etag, bytes::Bytes::from(bytes.clone()));
            return Ok(Some(bytes));
        }
        if store.rollout_parts(at).await?.is_none() {
            // Forgotten meanwhile: what this rewrite wrote must not outlive it.
            self.remove_objects(vec![key]).await?;
        }
        Ok(None)
    }

    /// Writes `bytes` at `key` if the object is still version `base` (none:
    /// absent); the new version's ETag, or `None` when it was not.
    async fn put_over(
        &self,
        key: &object_store::path::Path,
        bytes: Vec<u8>,
        base: Option<&str>,
    ) -> Result<Option<String>, RolloutError> {
        let mode = match base {
            None => PutMode::Create,
            Some(etag) => PutMode::Update(UpdateVersion { e_tag: Some(etag.to_owned()), version: None }),
        };
        let options = PutOptions { mode, ..PutOptions::default() };
        match self.objects.put_opts(key, PutPayload::from(bytes), options).await {
            Ok(put) => Ok(Some(put.e_tag.ok_or_else(|| RolloutError::Torn("a write without an ETag".into()))?)),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Version `version` of the object at `key` begins with `bytes` (`false`
    /// too when that version is gone).
    async fn begins_with(
        &self,
        key: &object_store::path::Path,
        version: &str,
        bytes: &[u8],
    ) -> Result<bool, RolloutError> {
        let options = GetOptions {
            range: Some(GetRange::Bounded(0..bytes.len() as u64)),
            if_match: Some(version.to_owned()),
            ..GetOptions::default()
        };
        match self.objects.get_opts(key, options).await {
            Ok(got) => Ok(got.bytes().await?.as_ref() == bytes),
            Err(object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The first `object_len` bytes of the rollout's object (none when that
    /// is 0), from this replica's copy of its recorded version where it has one.
    async fn object_prefix(
        &self,
        at: RolloutAt<'_>,
        rollout_path: &str,
        parts: &RolloutParts,
        len: u64,
    ) -> Result<Vec<u8>, RolloutError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let key = self.url.object_key(at.tenant, at.workspace, rollout_path)?;
        if let Some(kept) = self.kept_prefix(&key, parts, len) {
            return Ok(kept.to_vec());
        }
        Ok(self.first_bytes(&key, len).await?.bytes().await?.to_vec())
    }

    /// This replica's copy in memory of the object's first `len` bytes,
    /// when it holds the version the database records.
    fn kept_prefix(&self, key: &ObjectKey, parts: &RolloutParts, len: u64) -> Option<bytes::Bytes> {
        let kept = self.recent.get(key.as_ref(), parts.object_etag.as_deref()?)?;
        (kept.len() as u64 >= len).then(|| kept.slice(..len as usize))
    }

    /// A read of the object's first `len` bytes.
    async fn first_bytes(&self, key: &ObjectKey, len: u64) -> Result<object_store::GetResult, object_store::Error> {
        let options = GetOptions { range: Some(GetRange::Bounded(0..len)), ..GetOptions::default() };
        self.objects.get_opts(key, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(committed_len: u64, object_len: u64, journal: &[(u64, &str)]) -> RolloutParts {
        let journal = journal.iter().map(|(s, l)| (*s, l.as_bytes().to_vec())).collect();
        RolloutParts { committed_len, object_len, object_etag: None, journal }
    }

    #[test]
    fn a_rollout_is_its_object_then_its_journal() {
        let joined = |p: &RolloutParts, object: &str| joined(p, object.as_bytes().to_vec()).map(String::from_utf8);
        assert_eq!(joined(&parts(6, 3, &[(3, "b\n"), (5, "c")]), "a\n\n").unwrap().unwrap(), "a\n\nb\nc");
        assert_eq!(joined(&parts(2, 0, &[(0, "a\n")]), "").unwrap().unwrap(), "a\n");
        assert_eq!(joined(&parts(2, 2, &[]), "a\n").unwrap().unwrap(), "a\n");
        // A gap, an overlap, a short object, lines missing at the end: torn, never guessed.
        for (p, object) in [
            (parts(4, 1, &[(2, "bc")]), "a"),
            (parts(3, 2, &[(1, "bc")]), "ab"),
            (parts(3, 2, &[(2, "c")]), "a"),
            (parts(5, 2, &[(2, "c")]), "ab"),
        ] {
            assert!(matches!(joined(&p, object), Err(RolloutError::Torn(_))), "{p:?}");
        }
    }
    #[test]
    fn a_rollout_is_cut_at_its_limit_wherever_that_falls() {
        let rollout = parts(12, 4, &[(4, "b\nc\n"), (8, "d\ne\n")]);
        let joined = |limit| journal_up_to(&rollout, limit).map(|pieces| pieces.concat());
        assert_eq!(joined(2).unwrap(), b"", "within the object: no journal line");
        assert_eq!(joined(4).unwrap(), b"", "the object's end");
        assert_eq!(joined(6).unwrap(), b"b\n", "within a journal row, at a line's end");
        assert_eq!(joined(10).unwrap(), b"b\nc\nd\n");
        assert_eq!(joined(12).unwrap(), b"b\nc\nd\ne\n");
        assert_eq!(joined(u64::MAX).unwrap(), b"b\nc\nd\ne\n", "no limit: all that is committed");
        let gap = parts(12, 4, &[(5, "b\nc\n")]);
        assert!(matches!(journal_up_to(&gap, u64::MAX), Err(RolloutError::Torn(_))), "a row not where the last ends");
        let short = parts(12, 4, &[(4, "b\n")]);
        assert!(matches!(journal_up_to(&short, u64::MAX), Err(RolloutError::Torn(_))), "less than committed");
        assert_eq!(journal_up_to(&short, 6).unwrap().concat(), b"b\n", "what the limit asks for is there");
    }
}
