//! Restore jobs (SPEC §2.6): every memory file the consolidation agent may
//! write goes back to what a kept run left, through the same staged,
//! all-at-once publish as phase two, with a run record and history of its own.

use super::{Attempt, AttemptError, Completion, WorkerContext};
use crate::llm::TokenUsage;
use crate::store::{ClaimedJob, FileAtRun, JobOutcome, PhaseTwoReport, PhaseTwoRun, RunState};
use crate::tools::agent_may_write;
use crate::workspace::publish::FileChanges;
use crate::workspace::{confine, folder_files};
use chrono::Utc;
use std::collections::BTreeSet;
use uuid::Uuid;

pub struct Restore;

#[async_trait::async_trait]
impl super::JobRunner for Restore {
    async fn run(&self, ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt {
        let started_at = Utc::now();
        let result = restore(ctx, claimed).await;
        let (state, error, files_changed) = match &result {
            Ok(completion) => {
                (RunState::Succeeded, None, completion.files.as_ref().map(FileChanges::paths).unwrap_or_default())
            }
            Err(e) => (RunState::Failed, Some(e.message().to_owned()), Vec::new()),
        };
        let report = PhaseTwoReport {
            run: PhaseTwoRun {
                run_id: Uuid::new_v4(),
                kind: claimed.job.kind.as_str().to_owned(),
                job_id: claimed.job.job_id,
                session_id: claimed.job.session_id.as_ref().map_or_else(String::new, |s| s.as_str().to_owned()),
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
                restored_from: claimed.job.restore_run_id,
                rollout_id: None,
                reason: None,
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

async fn restore(ctx: &WorkerContext, claimed: &ClaimedJob) -> Result<Completion, AttemptError> {
    let job = &claimed.job;
    let target = job.restore_run_id.ok_or_else(|| AttemptError::fatal("a restore job names no run"))?;
    let copy = super::job_workspace(ctx, claimed).await?;
    let root = copy.root().to_owned();
    let memories = claimed.layout.memories_dir.normalized.clone();
    let memory_root =
        confine(&root, &memories).map_err(|e| AttemptError::fatal(format!("memories path refused: {e}")))?;
    let store_error = |e: crate::store::StoreError| AttemptError::retryable(format!("reading the history failed: {e}"));

    // What the run's history knows of, and what is there now.
    let mut paths: BTreeSet<String> = ctx
        .store
        .history_paths(claimed.tenant_id, &job.workspace, &job.layout)
        .await
        .map_err(store_error)?
        .into_iter()
        .collect();
    let scan_root = memory_root.clone();
    let on_disk = tokio::task::spawn_blocking(move || folder_files(&scan_root))
        .await
        .map_err(|e| AttemptError::retryable(e.to_string()))?
        .map_err(|e| AttemptError::retryable(format!("listing the memory folder failed: {e}")))?;
    paths.extend(on_disk.into_iter().map(|(path, _)| path));

    let mut files = FileChanges::default();
    for path in paths.into_iter().filter(|p| agent_may_write(p)) {
        let then = ctx
            .store
            .file_after_run(claimed.tenant_id, &job.workspace, &job.layout, target, &path)
            .await
            .map_err(store_error)?;
        let current = match tokio::fs::read(memory_root.join(&path)).await {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(AttemptError::retryable(format!("reading {path} failed: {e}"))),
        };
        let wanted = match then {
            FileAtRun::NotKept => {
                return Err(AttemptError::fatal(format!("the history of run {target} is no longer kept")));
            }
            // No kept run changed it: what it was then is not known, so it stays.
            FileAtRun::Unrecorded => continue,
            FileAtRun::Absent => None,
            FileAtRun::Content(bytes) => Some(bytes),
        };
        if wanted != current {
            match wanted {
                Some(bytes) => files.write(format!("{memories}/{path}"), bytes),
                None => files.delete(format!("{memories}/{path}")),
            }
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
