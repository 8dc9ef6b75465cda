//! Edit jobs (SPEC §2.10): a running agent's change to its memory, applied
//! in the layout's one-at-a-time lane to the files as they are when it
//! runs, then published like any run (redacted, staged, fenced, all at once)
//! with a run record and history of its own.

use super::{Attempt, AttemptError, Completion, WorkerContext};
use crate::llm::TokenUsage;
use crate::store::{ClaimedJob, JobOutcome, PhaseTwoReport, PhaseTwoRun, RunState};
use crate::tools::edit::apply_edit;
use crate::workspace::confine;
use crate::workspace::publish::FileChanges;
use chrono::Utc;
use uuid::Uuid;

pub struct Edit;

#[async_trait::async_trait]
impl super::JobRunner for Edit {
    async fn run(&self, ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt {
        let started_at = Utc::now();
        let result = edit(ctx, claimed).await;
        let (state, error, files_changed) = match &result {
            Ok(completion) => {
                (RunState::Succeeded, None, completion.files.as_ref().map(FileChanges::paths).unwrap_or_default())
            }
            Err(e) => (RunState::Failed, Some(e.message().to_owned()), Vec::new()),
        };
        let spec = claimed.job.edit.as_deref();
        let report = PhaseTwoReport {
            run: PhaseTwoRun {
                run_id: Uuid::new_v4(),
                kind: claimed.job.kind.as_str().to_owned(),
                job_id: claimed.job.job_id,
                session_id: spec.and_then(|e| e.session_id.clone()).unwrap_or_default(),
                state,
                selected: 0,
                added: 0,
                retained: 0,
                removed: 0,
                files_changed,
                usage: TokenUsage::default(),
                turns: 0,
                error,
                started_at,
                finished_at: Utc::now(),
                restored_from: None,
                rollout_id: spec.and_then(|e| e.rollout_id.clone()),
                reason: spec.and_then(|e| e.reason.clone()),
                sessions: Vec::new(),
                ledger: None,
                redactions: Default::default(),
            },
            selection: None,
            history: None,
        };
        (result, Some(report))
    }
}

async fn edit(ctx: &WorkerContext, claimed: &ClaimedJob) -> Result<Completion, AttemptError> {
    let job = &claimed.job;
    let spec = job.edit.clone().ok_or_else(|| AttemptError::fatal("an edit job without its edit"))?;
    let copy = super::job_workspace(ctx, claimed).await?;
    let root = copy.root().to_owned();
    let memories = claimed.layout.memories_dir.normalized.clone();
    let sessions = claimed.layout.sessions_dir.normalized.clone();
    let memory_root =
        confine(&root, &memories).map_err(|e| AttemptError::fatal(format!("memories path refused: {e}")))?;
    super::remove_earlier_leftovers(claimed, memory_root).await?;
    let applied = tokio::task::spawn_blocking(move || apply_edit(&root, &memories, &sessions, &spec))
        .await
        .map_err(|e| AttemptError::retryable(format!("applying the edit failed: {e}")))?
        // The files moved on since the edit was checked: it cannot succeed as asked.
        .map_err(|refusal| AttemptError::fatal(refusal.to_job_error()))?;
    let mut files = FileChanges::default();
    for (path, text) in applied.edits {
        match text {
            Some(text) => files.write(path, text),
            None => files.delete(path),
        }
    }
    Ok(Completion {
        outcome: JobOutcome::Succeeded { raw_memory: None },
        files: Some(files),
        usage: TokenUsage::default(),
        redactions: Default::default(),
        imported: None,
    })
}
