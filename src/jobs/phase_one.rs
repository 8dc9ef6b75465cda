//! A phase-one attempt: read the rollout's committed bytes, ask the model for
//! the three artifacts, and hand back the two files to write.

use super::{AttemptError, Completion, WorkerContext};
use crate::bucket::Bucket;
use crate::domain::redact::Counts;
use crate::llm::{FailureClass, Model, ModelError, Provider, StructuredRequest, TokenUsage};
use crate::pipeline::extractive;
use crate::pipeline::phase_one::{
    Extraction, PHASE_ONE_TOKEN_LIMIT, PhaseOnePrompt, RolloutArtifacts, SCHEMA_NAME, check_artifacts,
    format_raw_memory, format_rollout_summary, redact_slug, render_phase_one, rollout_extraction_schema,
    rollout_summary_file,
};
use crate::store::CommittedRollout;
use crate::store::journal_records::RolloutAt;
use crate::store::{ClaimedJob, JobOutcome, RawMemoryRecord};
use crate::workspace::publish::FileChanges;
use crate::workspace::{confine, read_committed};

fn io_error(what: &str, e: impl std::fmt::Display) -> AttemptError {
    AttemptError::spent(format!("{what}: {e}"), TokenUsage::default())
}

fn model_failure(e: ModelError, token_limit: usize) -> AttemptError {
    let message = format!("phase-one model call failed: {}", e.message);
    match e.class {
        FailureClass::ContextLength => AttemptError::Retryable {
            message,
            retry_after: None,
            usage: e.usage,
            token_limit: Some((token_limit / 2).max(1) as i64),
        },
        FailureClass::Transient | FailureClass::Permanent => {
            AttemptError::Retryable { message, retry_after: e.retry_after, usage: e.usage, token_limit: None }
        }
    }
}

/// Phase one of one rollout (R-P1).
pub struct PhaseOne;

#[async_trait::async_trait]
impl super::JobRunner for PhaseOne {
    async fn run(&self, ctx: &WorkerContext, claimed: &ClaimedJob) -> super::Attempt {
        (extract(ctx, claimed).await, None)
    }
}

/// The first `committed_len` bytes of the rollout file: what was acknowledged.
async fn read_rollout(root: &std::path::Path, rollout_path: &str, committed_len: u64) -> Result<Vec<u8>, AttemptError> {
    let rollout_file =
        confine(root, rollout_path).map_err(|e| AttemptError::fatal(format!("rollout path refused: {e}")))?;
    tokio::task::spawn_blocking(move || read_committed(&rollout_file, committed_len))
        .await
        .map_err(|e| io_error("reading the rollout failed", e))?
        .map_err(|e| io_error("reading the rollout failed", e))
}

/// The rollout as acknowledged when its object lives in a bucket: its
/// journal moved into the object first (SPEC §6.1: before phase one reads
/// it), then read whole — the journal too, should a rewrite have failed —
/// up to the length the job reads.
async fn rollout_in_bucket(
    ctx: &WorkerContext,
    bucket: &Bucket,
    at: RolloutAt<'_>,
    committed: &CommittedRollout,
) -> Result<Vec<u8>, AttemptError> {
    let rewritten = match bucket.rewrite_rollout(ctx.store.as_ref(), at, &committed.rollout_path).await {
        Ok(rewritten) => rewritten,
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "rewriting a rollout's object failed; reading its journal");
            None
        }
    };
    let mut bytes = match rewritten {
        Some(bytes) => bytes,
        None => bucket
            .rollout_bytes(ctx.store.as_ref(), at, &committed.rollout_path)
            .await
            .map_err(|e| io_error("reading the rollout failed", e))?
            .ok_or_else(|| AttemptError::fatal(format!("rollout {} is gone", at.rollout)))?,
    };
    bytes.truncate(committed.committed_len as usize);
    Ok(bytes)
}

/// The model's extraction of a rollout from its phase-one prompt.
async fn ask_model(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    model: &dyn Model,
    generate: &crate::domain::layout::GenerateConfig,
    prompt: PhaseOnePrompt,
    token_limit: usize,
) -> Result<(RolloutArtifacts, TokenUsage), AttemptError> {
    let request = StructuredRequest {
        model: generate.phase_one_model.clone(),
        instructions: prompt.instructions,
        user_message: prompt.user_message,
        schema_name: SCHEMA_NAME.into(),
        schema: rollout_extraction_schema(),
        reasoning_effort: generate.phase_one_reasoning_effort.clone(),
    };
    let reply = model.structured(&request).await.map_err(|e| model_failure(e, token_limit))?;
    if ctx.settings.log_content {
        tracing::debug!(job_id = %claimed.job.job_id, output = %reply.text, "phase-one model output");
    }
    let artifacts: RolloutArtifacts = serde_json::from_str(&reply.text).map_err(|e| {
        AttemptError::spent(format!("the model's output is not the phase-one schema: {e}"), reply.usage)
    })?;
    Ok((artifacts, reply.usage))
}

async fn extract(ctx: &WorkerContext, claimed: &ClaimedJob) -> Result<Completion, AttemptError> {
    let job = &claimed.job;
    let rollout_id = job.rollout_id.clone().ok_or_else(|| AttemptError::fatal("a phase-one job without a rollout"))?;
    let generate = super::generate_config(claimed)?;
    let committed = ctx
        .store
        .committed_rollout(claimed.tenant_id, &job.workspace, &job.layout, &rollout_id)
        .await
        .map_err(|e| io_error("reading the rollout's committed length failed", e))?
        .ok_or_else(|| AttemptError::fatal(format!("rollout {rollout_id} has no committed segments")))?;
    // SPEC §5: a rollout extracted (early, say) at exactly its committed
    // length has its raw memory already; no model call makes it again.
    let existing = ctx
        .store
        .raw_memory(claimed.tenant_id, &job.workspace, &job.layout, &rollout_id)
        .await
        .map_err(|e| io_error("reading the raw-memory index failed", e))?;
    if let Some(made) = existing.as_ref().filter(|m| m.extracted_len == committed.committed_len) {
        crate::metrics::phase_one_reused();
        let outcome = JobOutcome::Succeeded { raw_memory: Some(made.clone()) };
        return Ok(Completion::without_files(outcome, TokenUsage::default(), Counts::new()));
    }
    let root = ctx
        .volumes
        .workspace_root(claimed.tenant_id, &job.workspace)
        .map_err(|e| AttemptError::fatal(format!("workspace path refused: {e}")))?;
    let layout = claimed.layout.clone();
    let bytes = match ctx.volumes.bucket() {
        Some(bucket) => {
            let at = RolloutAt {
                tenant: claimed.tenant_id,
                workspace: &job.workspace,
                layout: &job.layout,
                rollout: &rollout_id,
            };
            rollout_in_bucket(ctx, bucket, at, &committed).await?
        }
        None => read_rollout(&root, &committed.rollout_path, committed.committed_len).await?,
    };
    let contents = String::from_utf8_lossy(&bytes);

    let token_limit = claimed.token_limit.map_or(PHASE_ONE_TOKEN_LIMIT, |l| l.max(1) as usize);
    // SPEC §4: the model sees the rollout with its secrets taken out.
    let mut sent_redacted = Counts::new();
    let redactor = layout.redactor();
    let redact = |text: &str, counts: &mut Counts| redactor.redact_jsonl(text, counts);
    let (prompt, facts) = render_phase_one(&contents, token_limit, generate.extra_prompt.as_deref(), &mut |t| {
        redact(t, &mut sent_redacted)
    })
    .map_err(AttemptError::fatal)?;
    if matches!(ctx.provider, Provider::Model(_)) {
        crate::metrics::redactions("model_input", &sent_redacted);
    } else {
        sent_redacted.clear();
    }
    if ctx.settings.log_content {
        tracing::debug!(job_id = %job.job_id, instructions = %prompt.instructions, user_message = %prompt.user_message, "phase-one prompt");
    }
    let (mut artifacts, usage) = match &ctx.provider {
        // Slugs, keywords and titles come from the text with its secrets out.
        Provider::Extractive => {
            (extractive::extract(&redactor.redact_jsonl(&contents, &mut Counts::new())), TokenUsage::default())
        }
        Provider::Model(model) => ask_model(ctx, claimed, model.as_ref(), &generate, prompt, token_limit).await?,
    };
    artifacts.rollout_slug =
        redact_slug(&artifacts.rollout_slug, |slug| redactor.redact_text(slug, &mut Counts::new()));
    let (slug, rollout_summary, raw_memory) =
        match check_artifacts(&artifacts).map_err(|m| AttemptError::spent(m, usage))? {
            Extraction::Empty => {
                return Ok(Completion::without_files(JobOutcome::Skipped, usage, sent_redacted));
            }
            Extraction::Memory { slug, rollout_summary, raw_memory } => (slug, rollout_summary, raw_memory),
        };

    let summary_file = rollout_summary_file(rollout_id.as_str(), &slug);
    let raw_text = format_raw_memory(rollout_id.as_str(), &facts, &committed.rollout_path, &summary_file, &raw_memory);
    let summary_text = format_rollout_summary(
        job.session_id.as_ref().map_or("", |s| s.as_str()),
        &facts,
        &committed.rollout_path,
        &rollout_summary,
    );
    let previous_summary = existing.map(|r| r.rollout_summary_file).filter(|previous| previous != &summary_file);
    let memories_dir = &layout.memories_dir.normalized;
    let memories =
        confine(&root, memories_dir).map_err(|e| AttemptError::fatal(format!("memories path refused: {e}")))?;
    super::remove_earlier_leftovers(claimed, memories).await?;
    let mut files = FileChanges::default();
    files.write(format!("{memories_dir}/raw_memories/{}.md", rollout_id.as_str()), raw_text);
    files.write(format!("{memories_dir}/{summary_file}"), summary_text);
    if let Some(stale) = previous_summary {
        files.delete(format!("{memories_dir}/{stale}"));
    }
    let record = RawMemoryRecord {
        rollout_id,
        updated_at: facts.updated_at,
        rollout_path: committed.rollout_path,
        rollout_summary_file: summary_file,
        terminal_state: facts.terminal_state,
        extracted_len: committed.committed_len,
    };
    Ok(Completion {
        outcome: JobOutcome::Succeeded { raw_memory: Some(record) },
        files: Some(files),
        usage,
        redactions: sent_redacted,
        imported: None,
    })
}
