//! Import jobs (SPEC §2.7): an archive the API stored is read twice. The
//! first pass checks all of it and plans what it holds, writing nothing; the
//! second stages its files beside their places in the (empty) workspace, as
//! one publish. The fenced finish registers the rollouts, raw memories and
//! layouts with the outcome, and only then are the files renamed into place:
//! a failed or interrupted import leaves nothing behind.

use super::{Attempt, AttemptError, Completion, ImportStaged, Imported, WorkerContext};
use crate::domain::ids::LayoutName;
use crate::domain::layout::{LayoutPutError, StoredLayout, ValidLayout, decide_layout_put};
use crate::domain::portability::{
    MANIFEST_NAME, MAX_EXPANSION, MAX_MANIFEST_BYTES, ManifestLayout, Placement, archive_path, placement,
    raw_memory_header, read_manifest,
};
use crate::domain::redact::Counts;
use crate::llm::TokenUsage;
use crate::store::{ClaimedJob, ImportRecord, ImportedRollout, JobOutcome, with_implicit_default};
use crate::workspace::publish::{Manifest, PublishScope, Publisher};
use serde::de::IgnoredAny;
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

mod after;
mod entries;
mod in_bucket;
mod redacting;

pub(crate) use after::after_finish;
use redacting::{LineRedactor, Lines, redaction_of};

pub struct Import;

#[async_trait::async_trait]
impl super::JobRunner for Import {
    async fn run(&self, ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt {
        (import(ctx, claimed).await, None)
    }
}

/// The largest raw-memory file whose header is read.
const MAX_RAW_MEMORY_BYTES: u64 = 16 << 20;

/// Why an archive is refused (the job's error starts with the code).
fn invalid(detail: impl std::fmt::Display) -> ImportError {
    ImportError::Refused(format!("invalid_archive: {detail}"))
}

pub(crate) enum ImportError {
    /// The archive or the workspace will never do: the job fails.
    Refused(String),
    /// The disk failed: another attempt may do.
    Io(io::Error),
}

impl From<io::Error> for ImportError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

async fn import(ctx: &WorkerContext, claimed: &ClaimedJob) -> Result<Completion, AttemptError> {
    let (tenant, workspace) = (claimed.tenant_id, claimed.job.workspace.clone());
    let archive = ctx.volumes.import_archive(claimed.job.job_id);
    let stored = ctx
        .store
        .stored_layouts(tenant)
        .await
        .map_err(|e| AttemptError::retryable(format!("reading layouts failed: {e}")))?;
    let layouts = with_implicit_default(stored);
    if !ctx.store.workspace_empty(tenant, &workspace).await.map_err(|e| AttemptError::retryable(e.to_string()))? {
        return Err(AttemptError::fatal(format!(
            "workspace_not_empty: workspace {workspace} holds sessions, rollouts or memory"
        )));
    }
    if let Some(bucket) = ctx.volumes.bucket() {
        in_bucket::fetch(bucket, claimed, &archive).await?;
    }
    let root = ctx.volumes.workspace_root(tenant, &workspace).map_err(|e| AttemptError::fatal(e.to_string()))?;
    // An earlier attempt killed mid-stage left its files anywhere in the workspace.
    super::remove_earlier_leftovers(claimed, root.clone()).await?;
    let room = ctx
        .volumes
        .spare_bytes()
        .map_err(|e| AttemptError::retryable(format!("reading the free space failed: {e}")))?;
    let limits = ctx.store.tenant_limits(tenant).await.map_err(|e| AttemptError::retryable(e.to_string()))?;
    let quota = limits.unwrap_or_default().over(ctx.settings.default_limits).storage_bytes.filter(|q| *q > 0);
    // The archive's claim on the tenant's storage stays as it is while the
    // job reads it; the room the rest leaves bounds what it may place.
    let archive_bytes = std::fs::metadata(&archive).map(|m| m.len()).unwrap_or(0);
    let quota_left = match quota {
        Some(limit) => Some(reserve(ctx, claimed, archive_bytes, limit).await?),
        None => None,
    };
    let scope = PublishScope {
        job_id: claimed.job.job_id,
        tenant,
        workspace: workspace.as_str().to_owned(),
        layout: claimed.job.layout.as_str().to_owned(),
    };
    let publisher = ctx.publisher.clone();
    let bounds = Bounds { room, quota_left, max_line: ctx.settings.max_segment_bytes as u64 };
    let (archive_path, root_path) = (archive.clone(), root.clone());
    let planned = tokio::task::spawn_blocking(move || plan(&archive_path, &root_path, &layouts, bounds)).await;
    let mut plan = unblocked(planned)?;
    plan.record.storage_limit = quota;
    // What it will place is known now: it becomes the claim, if it fits.
    if let Some(limit) = quota {
        let room = reserve(ctx, claimed, plan.bytes, limit).await?;
        if plan.bytes > room {
            return Err(AttemptError::fatal(format!(
                "quota_exceeded: the archive's {} bytes do not fit in the {room} the tenant's storage limit leaves",
                plan.bytes
            )));
        }
    }
    let staged = match ctx.volumes.bucket() {
        Some(bucket) => in_bucket::stage(ctx, bucket, claimed, archive, plan).await,
        None => {
            tokio::task::spawn_blocking(move || {
                let (manifest, counts) = stage(&archive, &root, &mut plan, &publisher, scope)?;
                Ok::<_, ImportError>((plan, (ImportStaged::Volume(manifest), counts)))
            })
            .await
        }
    };
    let (plan, (staged, redactions)) = unblocked(staged)?;
    tracing::info!(
        job_id = %claimed.job.job_id, rollouts = plan.record.rollouts.len(), raw_memories = plan.record.raw_memories.len(),
        files = plan.files.len(), "import staged"
    );
    crate::metrics::redactions("import", &redactions);
    Ok(Completion {
        outcome: JobOutcome::Succeeded { raw_memory: None },
        files: None,
        usage: TokenUsage::default(),
        redactions,
        imported: Some(Box::new(Imported { staged, record: plan.record })),
    })
}

/// A blocking pass's outcome as the attempt's.
fn unblocked<T>(joined: Result<Result<T, ImportError>, tokio::task::JoinError>) -> Result<T, AttemptError> {
    match joined.map_err(|e| AttemptError::retryable(format!("the import panicked: {e}")))? {
        Ok(done) => Ok(done),
        Err(ImportError::Refused(message)) => Err(AttemptError::fatal(message)),
        Err(ImportError::Io(e)) => {
            Err(AttemptError::retryable(format!("reading the archive or writing the files failed: {e}")))
        }
    }
}

/// Sets the job's claim on the tenant's storage to `bytes` if it fits; the
/// room the rest of the tenant's storage leaves under `limit`.
async fn reserve(ctx: &WorkerContext, claimed: &ClaimedJob, bytes: u64, limit: u64) -> Result<u64, AttemptError> {
    match ctx.store.reserve_import(claimed, bytes, limit).await {
        Ok(Some(room)) => Ok(room),
        Ok(None) => Err(AttemptError::retryable("the job is no longer this worker's".to_owned())),
        Err(e) => Err(AttemptError::retryable(format!("claiming the import's storage failed: {e}"))),
    }
}

/// What the first pass found: the files to place and the rows to register.
struct Plan {
    files: HashSet<String>,
    /// The bytes the files take, as their entries declare them.
    bytes: u64,
    record: ImportRecord,
    /// Every layout the files go to (the tenant's and the archive's new ones).
    layouts: Vec<StoredLayout>,
}

/// What an archive must fit in.
#[derive(Clone, Copy)]
struct Bounds {
    /// The bytes the disk can spare.
    room: u64,
    /// The bytes left under the tenant's storage limit, if it has one.
    quota_left: Option<u64>,
    /// `MEMORYD_MAX_SEGMENT_BYTES`: the longest line a file read line by line may have.
    max_line: u64,
}

/// Every layout an archive's files may go to, and those of them to create.
pub(crate) type MergedLayouts = (Vec<StoredLayout>, Vec<(LayoutName, ValidLayout)>);

/// The layouts the archive's files are placed in: the tenant's, and those
/// of a memoryd manifest it lacks (a layout it has under another config is
/// refused).
pub(crate) fn merged_layouts(
    tenant: &[StoredLayout],
    manifest: &[ManifestLayout],
) -> Result<MergedLayouts, ImportError> {
    let mut all = tenant.to_vec();
    let mut created = Vec::new();
    for layout in manifest {
        let config = serde_json::from_str(layout.config.get())
            .map_err(|e| invalid(format!("{MANIFEST_NAME}: layout {}: {e}", layout.name)))?;
        let valid =
            ValidLayout::new(config).map_err(|e| invalid(format!("{MANIFEST_NAME}: layout {}: {e}", layout.name)))?;
        match tenant.iter().find(|l| l.name == layout.name) {
            Some(existing) if existing.layout.config != valid.config => {
                return Err(ImportError::Refused(format!(
                    "layout_conflict: layout {} has another config here than in the archive",
                    layout.name
                )));
            }
            Some(_) => {}
            None => {
                // As `PUT /v1/layouts` would make it: no folder shared with another layout.
                let existing: Vec<_> = all.iter().map(|l| (l.name.clone(), l.layout.clone())).collect();
                if let Err(LayoutPutError::Conflict(detail)) = decide_layout_put(&existing, &layout.name, &valid, None)
                {
                    return Err(ImportError::Refused(format!(
                        "layout_conflict: {MANIFEST_NAME}: layout {}: {detail}",
                        layout.name
                    )));
                }
                all.push(StoredLayout { name: layout.name.clone(), layout: valid.clone(), updated_at: None });
                created.push((layout.name.clone(), valid));
            }
        }
    }
    Ok((all, created))
}

/// Before any entry is read: the workspace folder holds no files, and the
/// body is gzip. The archive's compressed size.
fn check_first(archive: &Path, root: &Path) -> Result<u64, ImportError> {
    if crate::workspace::files_under(root)?
        .iter()
        .any(|(p, _)| !p.file_name().is_some_and(crate::workspace::is_temporary_file))
    {
        return Err(ImportError::Refused("workspace_not_empty: the workspace folder already holds files".to_owned()));
    }
    let compressed = std::fs::metadata(archive)?.len();
    let mut magic = [0u8; 2];
    let read = File::open(archive)?.read(&mut magic)?;
    if read < 2 || magic != [0x1f, 0x8b] {
        return Err(invalid("the body is not gzip"));
    }
    Ok(compressed)
}

/// The entries so far expand to `expanded` bytes: no bomb, and within the
/// disk's room and the tenant's storage limit.
fn check_expansion(expanded: u64, compressed: u64, bounds: Bounds) -> Result<(), ImportError> {
    if expanded > compressed.saturating_mul(MAX_EXPANSION) {
        return Err(invalid(entries::EXPANDED));
    }
    if expanded > bounds.room {
        return Err(ImportError::Refused(format!(
            "insufficient_storage: the archive's {expanded}+ bytes do not fit in the space the disk can spare"
        )));
    }
    if bounds.quota_left.is_some_and(|left| expanded > left) {
        return Err(ImportError::Refused(format!(
            "quota_exceeded: the archive's {expanded}+ bytes would take the tenant past its storage limit"
        )));
    }
    Ok(())
}

/// A raw memory was extracted from what its manifest says, or else from
/// the whole rollout the archive holds (an SDK's memory of a finished run).
fn with_extracted_lengths(
    raw_memories: Vec<(LayoutName, crate::store::RawMemoryRecord)>,
    manifest: Option<&[ManifestLayout]>,
    rollouts: &[ImportedRollout],
) -> Vec<(LayoutName, crate::store::RawMemoryRecord)> {
    raw_memories
        .into_iter()
        .map(|(layout, mut row)| {
            let from_manifest = manifest
                .iter()
                .copied()
                .flatten()
                .find(|m| m.name == layout)
                .and_then(|m| m.extracted.get(row.rollout_id.as_str()).copied());
            let whole = rollouts.iter().find(|r| r.layout == layout && r.rollout_id == row.rollout_id).map(|r| r.len);
            row.extracted_len = from_manifest.or(whole).unwrap_or(0);
            (layout, row)
        })
        .collect()
}

/// The first pass: every entry checked, nothing written.
fn plan(archive: &Path, root: &Path, layouts: &[StoredLayout], bounds: Bounds) -> Result<Plan, ImportError> {
    let compressed = check_first(archive, root)?;
    let mut reader = entries::open(archive)?;
    let mut layouts = layouts.to_vec();
    let mut manifest: Option<Vec<ManifestLayout>> = None;
    let mut record = ImportRecord::default();
    let mut files = HashSet::new();
    let mut raw_memories = Vec::new();
    let (mut first, mut expanded) = (true, 0u64);
    for entry in entries::checked(&mut reader)? {
        let (name, mut entry) = entry?;
        let path = archive_path(&name).map_err(invalid)?;
        let is_first = std::mem::replace(&mut first, false);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if !kind.is_file() {
            return Err(invalid(format!("entry {path}: only files and folders may be imported, not {kind:?}")));
        }
        let size = entry.size();
        expanded += size;
        check_expansion(expanded, compressed, bounds)?;
        if path == MANIFEST_NAME {
            if !is_first {
                return Err(invalid(format!("{MANIFEST_NAME} must be the archive's first entry")));
            }
            if size > MAX_MANIFEST_BYTES {
                return Err(invalid(format!("{MANIFEST_NAME} is larger than {MAX_MANIFEST_BYTES} bytes")));
            }
            let mut bytes = Vec::with_capacity(size as usize);
            entry.read_to_end(&mut bytes).map_err(entries::unreadable)?;
            let read = read_manifest(&bytes).map_err(invalid)?;
            let (all, created) = merged_layouts(&layouts, &read)?;
            layouts = all;
            record.layouts = created;
            manifest = Some(read);
            continue;
        }
        if !files.insert(path.clone()) {
            return Err(invalid(format!("entry {path} appears twice")));
        }
        match placement(&path, &layouts) {
            Placement::Selection => {
                files.remove(&path);
            }
            Placement::Outside => {
                let folders: Vec<String> = layouts
                    .iter()
                    .flat_map(|l| [l.layout.sessions_dir.normalized.clone(), l.layout.memories_dir.normalized.clone()])
                    .collect();
                return Err(invalid(format!(
                    "entry {path} is in none of the layouts' folders ({})",
                    folders.join(", ")
                )));
            }
            Placement::Rollout { layout, rollout_id } => {
                let lines = check_lines(&path, &mut entry, bounds.max_line, true)?;
                let layout = LayoutName::parse(&layout).expect("a layout's own name");
                record.rollouts.push(ImportedRollout {
                    layout,
                    rollout_id,
                    rollout_path: path.clone(),
                    len: size,
                    lines,
                    object_etag: None,
                });
            }
            Placement::RawMemory { layout } if size <= MAX_RAW_MEMORY_BYTES => {
                let mut text = String::new();
                if entry.read_to_string(&mut text).is_ok()
                    && let Some(row) = raw_memory_header(&text)
                {
                    raw_memories.push((LayoutName::parse(&layout).expect("a layout's own name"), row));
                }
            }
            Placement::RawMemory { .. } | Placement::Other => {
                // Staged a line at a time: each line must fit in memory.
                if size > MAX_RAW_MEMORY_BYTES && redaction_of(&path, &layouts).is_some() {
                    check_lines(&path, &mut entry, bounds.max_line, false)?;
                }
            }
        }
    }
    record.raw_memories = with_extracted_lengths(raw_memories, manifest.as_deref(), &record.rollouts);
    Ok(Plan { files, bytes: expanded, record, layouts })
}

/// Every line of `content` at most `max_line` bytes and, for a rollout
/// (`json`), whole JSON ended by a newline as the SDK wrote it — checked
/// without building it; the lines counted.
fn check_lines(path: &str, content: &mut dyn Read, max_line: u64, json: bool) -> Result<i64, ImportError> {
    let mut reader = BufReader::new(content);
    let mut line = Vec::new();
    let mut number = 0i64;
    loop {
        line.clear();
        let read = (&mut reader).take(max_line + 1).read_until(b'\n', &mut line).map_err(entries::unreadable)?;
        if read == 0 {
            return Ok(number);
        }
        number += 1;
        let ended = line.last() == Some(&b'\n');
        if line.len() as u64 - u64::from(ended) > max_line {
            return Err(invalid(format!(
                "{path} line {number}: longer than {max_line} bytes (MEMORYD_MAX_SEGMENT_BYTES)"
            )));
        }
        if !json {
            continue;
        }
        if !ended {
            return Err(invalid(format!("{path} line {number}: the last line has no newline (cut short?)")));
        }
        let parsed = std::str::from_utf8(&line)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<IgnoredAny>(text).map_err(|e| e.to_string()));
        if let Err(e) = parsed {
            return Err(invalid(format!("{path} line {number}: not JSON ({e})")));
        }
    }
}

/// Where the second pass puts each file it places.
trait Placing {
    /// Places `path` with what `content` holds; the bytes written.
    fn add(&mut self, path: &str, content: &mut dyn Read) -> io::Result<u64>;
}

impl Placing for crate::workspace::publish::Staging<'_> {
    fn add(&mut self, path: &str, content: &mut dyn Read) -> io::Result<u64> {
        crate::workspace::publish::Staging::add(self, path, content)
    }
}

/// The second pass on a volume: each planned file staged beside its place.
fn stage(
    archive: &Path,
    root: &Path,
    plan: &mut Plan,
    publisher: &Publisher,
    scope: PublishScope,
) -> Result<(Manifest, Counts), ImportError> {
    let mut staging = publisher.begin(scope, root);
    let counts = place(archive, plan, &mut staging)?;
    Ok((staging.finish()?, counts))
}

/// The second pass: each planned file placed, redacted with its layout's
/// rules where it is memory (SPEC §2.7, §4) and, for a layout that redacts
/// at ingest, where it is a conversation; the secrets taken out, by rule.
fn place(archive: &Path, plan: &mut Plan, staging: &mut dyn Placing) -> Result<Counts, ImportError> {
    let mut reader = entries::open(archive)?;
    let mut counts = Counts::new();
    let mut placed = 0;
    for entry in entries::checked(&mut reader)? {
        let (name, mut entry) = entry?;
        let Ok(path) = archive_path(&name) else { continue };
        if !entry.header().entry_type().is_file() || !plan.files.contains(&path) {
            continue;
        }
        let written = match redaction_of(&path, &plan.layouts) {
            None => staging.add(&path, &mut entry)?,
            Some((redactor, Lines::Json)) => {
                staging.add(&path, &mut LineRedactor::new(&mut entry, &redactor, true, &mut counts))?
            }
            Some((redactor, Lines::Text)) if entry.size() <= MAX_RAW_MEMORY_BYTES => {
                let mut bytes = Vec::with_capacity(entry.size() as usize);
                entry.read_to_end(&mut bytes)?;
                let bytes = match String::from_utf8(bytes) {
                    Ok(text) => redactor.redact_text(&text, &mut counts).into_bytes(),
                    Err(not_text) => not_text.into_bytes(),
                };
                staging.add(&path, &mut bytes.as_slice())?
            }
            Some((redactor, Lines::Text)) => {
                staging.add(&path, &mut LineRedactor::new(&mut entry, &redactor, false, &mut counts))?
            }
        };
        // A conversation redacted at ingest is registered at the length placed.
        if let Some(rollout) = plan.record.rollouts.iter_mut().find(|r| r.rollout_path == path) {
            rollout.len = written;
        }
        placed += 1;
    }
    if placed != plan.files.len() {
        return Err(ImportError::Io(io::Error::other("the archive changed between its two readings")));
    }
    Ok(counts)
}

/// What can be told of an archive before its job starts: gzip bytes, a tar,
/// and a memoryd manifest (if it begins with one) whose layouts do not clash
/// with the tenant's; the names of the layouts it would create.
pub(crate) fn precheck(archive: &Path, layouts: &[StoredLayout]) -> Result<Vec<String>, ImportError> {
    let mut magic = [0u8; 2];
    let read = File::open(archive)?.read(&mut magic)?;
    if read < 2 || magic != [0x1f, 0x8b] {
        return Err(invalid("the body is not gzip"));
    }
    let mut reader = entries::open(archive)?;
    let Some(first) = entries::checked(&mut reader)?.next() else { return Ok(Vec::new()) };
    let (name, mut first) = first?;
    let path = archive_path(&name).map_err(invalid)?;
    if path == MANIFEST_NAME {
        if first.size() > MAX_MANIFEST_BYTES {
            return Err(invalid(format!("{MANIFEST_NAME} is larger than {MAX_MANIFEST_BYTES} bytes")));
        }
        if first.size() > std::fs::metadata(archive)?.len().saturating_mul(MAX_EXPANSION) {
            return Err(invalid(entries::EXPANDED));
        }
        let mut bytes = Vec::with_capacity(first.size() as usize);
        first.read_to_end(&mut bytes).map_err(entries::unreadable)?;
        let (_, created) = merged_layouts(layouts, &read_manifest(&bytes).map_err(invalid)?)?;
        return Ok(created.into_iter().map(|(name, _)| name.as_str().to_owned()).collect());
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollout_lines_must_be_whole_json() {
        let check = |bytes: &[u8], json: bool| check_lines("sessions/s.jsonl", &mut &bytes[..], 8, json);
        assert_eq!(check(b"{\"a\":1}\n{\"b\":2}\n", true).ok(), Some(2));
        assert_eq!(check(b"", true).ok(), Some(0));
        assert_eq!(check(b"[1,2,34]\n", true).ok(), Some(1), "a line of the longest length");
        assert_eq!(check(b"12345678", false).ok(), Some(1), "text needs no last newline");
        let refused = |bytes: &[u8], json: bool| match check(bytes, json) {
            Err(ImportError::Refused(m)) => m,
            _ => panic!("accepted"),
        };
        assert!(refused(b"{\"a\":1}\n{\"b\"", true).contains("sessions/s.jsonl line 2: the last line has no newline"));
        assert!(refused(b"{\"a\":1}\nnot json\n", true).contains("sessions/s.jsonl line 2: not JSON"));
        assert!(refused(b"\"\xff\"\n", true).contains("line 1: not JSON"), "not UTF-8");
        assert!(refused(b"[1,2,345]\n", true).contains("line 1: longer than 8 bytes"));
        assert!(refused(b"1\n123456789", false).contains("line 2: longer than 8 bytes"));
    }
}
