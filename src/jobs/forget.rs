//! Forget jobs (SPEC §2.7). A forget of conversations removes their rollout
//! files, then consolidates the layout's memory without them through the
//! same staged, fenced publish as phase two: `scrub` tells the agent what was
//! removed, `rebuild` starts the memory files from nothing. A forget of a
//! workspace or a tenant removes its whole folder. In every case the fenced
//! finish erases the rows.

use super::phase_two::{LayoutPlace, PhaseTwoInput, RunLog, consolidate, prepare_input, succeeded};
use super::{Attempt, AttemptError, Completion, WorkerContext};
use crate::domain::ids::{RolloutId, WorkspaceName};
use crate::domain::job::{ForgetMode, ForgetScope, ForgetSpec};
use crate::domain::layout::ValidLayout;
use crate::domain::redact::Counts;
use crate::llm::TokenUsage;
use crate::pipeline::selection::SelectionPolicy;
use crate::pipeline::selection::raw_memories_md;
use crate::store::{ClaimedJob, JobOutcome, RunState};
use crate::tools::MemoryTools;
use crate::workspace::{confine, folder_files, remove_if_present, sync_dir};
use std::path::{Path, PathBuf};

/// How many raw memories a forget consolidates when its layout no longer
/// generates memory (it then only removes and empties).
const READ_ONLY_CAP: usize = 256;

pub struct Forget;

#[async_trait::async_trait]
impl super::JobRunner for Forget {
    async fn run(&self, ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt {
        let Some(spec) = claimed.job.forget.clone() else {
            return (Err(AttemptError::fatal("a forget job names nothing to forget")), None);
        };
        match spec.scope {
            ForgetScope::Rollouts => forget_rollouts(ctx, claimed, &spec).await,
            ForgetScope::Workspace => {
                let workspace = &claimed.job.workspace;
                if let Err(e) = remove_objects(ctx, claimed, Some(workspace)).await {
                    return (Err(e), None);
                }
                let root = ctx.volumes.workspace_root(claimed.tenant_id, workspace);
                (remove_folder(ctx, root.map_err(|e| e.to_string())).await, None)
            }
            ForgetScope::Tenant => {
                if let Err(e) = remove_objects(ctx, claimed, None).await {
                    return (Err(e), None);
                }
                let root = ctx.volumes.tenant_root(claimed.tenant_id);
                (remove_folder(ctx, root.map_err(|e| e.to_string())).await, None)
            }
        }
    }
}

/// Where rollouts live in a bucket: every object of the tenant, or of one
/// of its workspaces, removed (SPEC §6.1).
async fn remove_objects(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    workspace: Option<&WorkspaceName>,
) -> Result<(), AttemptError> {
    let Some(bucket) = ctx.volumes.bucket() else { return Ok(()) };
    let removed = bucket
        .remove_all_of(claimed.tenant_id, workspace)
        .await
        .map_err(|e| io_failure("removing the objects failed", e))?;
    if let Some(cache) = ctx.volumes.cache() {
        cache.forget(claimed.tenant_id, workspace).await;
    }
    tracing::info!(job_id = %claimed.job.job_id, removed, "removed the forgotten objects");
    Ok(())
}

fn io_failure(what: &str, e: impl std::fmt::Display) -> AttemptError {
    AttemptError::retryable(format!("{what}: {e}"))
}

/// Removes a workspace's or a tenant's whole folder. Publishes that cancelled
/// jobs left are settled first, so that none puts a file back afterwards.
async fn remove_folder(ctx: &WorkerContext, root: Result<PathBuf, String>) -> Result<Completion, AttemptError> {
    let root = root.map_err(|e| AttemptError::fatal(format!("folder path refused: {e}")))?;
    super::recover_publishes(ctx, None).await;
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        match std::fs::remove_dir_all(&root) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        match root.parent().map(sync_dir) {
            Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    })
    .await
    .map_err(|e| io_failure("removing the folder failed", e))?
    .map_err(|e| io_failure("removing the folder failed", e))?;
    Ok(Completion::without_files(JobOutcome::Succeeded { raw_memory: None }, TokenUsage::default(), Counts::new()))
}

/// The rollout summaries of `ids` in `summaries` (any slug), but not one
/// that is the indexed summary of another rollout (`a_b_x.md` may be the
/// summary of `a_b`, not of `a`).
fn summaries_of(summaries: &[String], ids: &[RolloutId], others: &[String]) -> Vec<String> {
    summaries
        .iter()
        .filter(|name| {
            name.ends_with(".md")
                && ids.iter().any(|id| name.starts_with(&format!("{id}_")))
                && !others.iter().any(|other| other == *name)
        })
        .cloned()
        .collect()
}

async fn forget_rollouts(ctx: &WorkerContext, claimed: &ClaimedJob, spec: &ForgetSpec) -> Attempt {
    let mut log = RunLog::new();
    let result = forget_and_consolidate(ctx, claimed, spec, &mut log).await;
    match result {
        Ok((completion, document)) => {
            let report = log.report(claimed, RunState::Succeeded, None, Some(document));
            (Ok(completion), Some(report))
        }
        Err(e) => {
            log.files_changed.clear();
            let report = log.report(claimed, RunState::Failed, Some(e.message().to_owned()), None);
            (Err(e), Some(report))
        }
    }
}

fn list_names(dir: &Path) -> std::io::Result<Vec<String>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<Vec<_>>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Removes the rollout files of `ids`: marked, they take no segment, and a
/// crash before the finish leaves the job to be run again.
async fn remove_rollout_files(root: &Path, layout: &ValidLayout, ids: &[RolloutId]) -> Result<(), AttemptError> {
    let rollout_files = ids
        .iter()
        .map(|id| confine(root, &layout.rollout_path(id)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AttemptError::fatal(format!("rollout path refused: {e}")))?;
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        for file in &rollout_files {
            remove_if_present(file)?;
            if let Some(dir) = file.parent() {
                match sync_dir(dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| io_failure("removing a rollout file failed", e))?
    .map_err(|e| io_failure("removing a rollout file failed", e))
}

/// The names in the memory folder's `rollout_summaries/`, and its skills' paths.
async fn list_memory_folder(memory_root: &Path) -> Result<(Vec<String>, Vec<String>), AttemptError> {
    let summaries_dir = memory_root.join("rollout_summaries");
    let skills_dir = memory_root.join("skills");
    tokio::task::spawn_blocking(move || -> std::io::Result<_> {
        let skills = match folder_files(&skills_dir) {
            Ok(files) => files.into_iter().map(|(path, _)| path).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok((list_names(&summaries_dir)?, skills))
    })
    .await
    .map_err(|e| io_failure("listing the memory folder failed", e))?
    .map_err(|e| io_failure("listing the memory folder failed", e))
}

/// The paths (from the workspace root) of the raw memories and rollout
/// summaries of `ids`: by name in `summaries`, or as the raw-memory index
/// recorded them (`indexed`), but none of the rollouts that stay (`others`).
fn forgotten_paths(
    memory_root: &Path,
    memories: &str,
    ids: &[RolloutId],
    summaries: &[String],
    others: &[String],
    indexed: &[String],
) -> Vec<String> {
    let mut paths = Vec::new();
    for id in ids {
        if memory_root.join(format!("raw_memories/{id}.md")).exists() {
            paths.push(format!("{memories}/raw_memories/{id}.md"));
        }
    }
    let mut doomed = summaries_of(summaries, ids, others);
    for indexed in indexed {
        let name = indexed.trim_start_matches("rollout_summaries/").to_owned();
        if !doomed.contains(&name) && summaries.contains(&name) {
            doomed.push(name);
        }
    }
    paths.extend(doomed.iter().map(|name| format!("{memories}/rollout_summaries/{name}")));
    paths
}

async fn forget_and_consolidate(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    spec: &ForgetSpec,
    log: &mut RunLog,
) -> Result<(Completion, serde_json::Value), AttemptError> {
    let job = &claimed.job;
    let layout = &claimed.layout;
    let ids = &spec.rollout_ids;
    let copy = super::job_workspace(ctx, claimed).await?;
    let root = copy.root().to_owned();
    let memories = layout.memories_dir.normalized.clone();
    let memory_root =
        confine(&root, &memories).map_err(|e| AttemptError::fatal(format!("memories path refused: {e}")))?;
    super::remove_earlier_leftovers(claimed, memory_root.clone()).await?;
    // What dead attempts of other jobs staged here may hold the forgotten text.
    let removed = super::leftovers::remove_abandoned(&ctx.store, &ctx.publisher, vec![root.clone()]).await;
    if removed > 0 {
        tracing::info!(job_id = %job.job_id, removed, "removed temporary files of dead attempts in the workspace");
    }

    // The conversations themselves go now: marked, they take no segment, and
    // a crash before the finish leaves the job to be run again.
    remove_rollout_files(&root, layout, ids).await?;
    if let Some(bucket) = ctx.volumes.bucket() {
        let paths: Vec<String> = ids.iter().map(|id| layout.rollout_path(id)).collect();
        bucket
            .remove_rollouts(claimed.tenant_id, &job.workspace, &paths)
            .await
            .map_err(|e| io_failure("removing a rollout's object failed", e))?;
    }

    // Their raw memories and summaries leave the working copy before the
    // agent can read them.
    let store = ctx.store.as_ref();
    let mut indexed_summaries = Vec::new();
    for id in ids {
        if let Some(raw) = store
            .raw_memory(claimed.tenant_id, &job.workspace, &job.layout, id)
            .await
            .map_err(|e| io_failure("reading the raw-memory index failed", e))?
        {
            indexed_summaries.push(raw.rollout_summary_file);
        }
    }
    let (names, skills) = list_memory_folder(&memory_root).await?;
    let policy = layout
        .config
        .generate
        .as_ref()
        .map_or(SelectionPolicy { cap: READ_ONLY_CAP, by_usage: false, unused_since: None }, |g| {
            SelectionPolicy::of(g, chrono::Utc::now())
        });
    let place = LayoutPlace::of_job(claimed, &root);
    let PhaseTwoInput { selection, chunks } =
        prepare_input(store, &place, &policy, ids, spec.mode == ForgetMode::Scrub)
            .await
            .map_err(|e| io_failure("reading the selection failed", e))?;
    // Summaries that belong to the rollouts that stay are not this forget's.
    let others: Vec<String> = selection
        .selected
        .iter()
        .map(|s| s.rollout_summary_file.trim_start_matches("rollout_summaries/").to_owned())
        .collect();
    let mut tools =
        MemoryTools::new(root.clone(), &memories, &layout.sessions_dir.normalized).redacting(layout.redactor());
    // Their paths name them: the run record lists the files it changed without these.
    let forgotten_paths = forgotten_paths(&memory_root, &memories, ids, &names, &others, &indexed_summaries);
    for path in &forgotten_paths {
        tools.delete_owned(path);
    }
    let changed = |tools: &MemoryTools| -> Vec<String> {
        tools.changed_files().into_iter().filter(|p| !forgotten_paths.contains(p)).collect()
    };
    let empty_memory = |tools: &mut MemoryTools| {
        for file in ["MEMORY.md", "memory_summary.md"] {
            tools.write_owned(&format!("{memories}/{file}"), "");
        }
        for skill in &skills {
            tools.delete_owned(&format!("{memories}/skills/{skill}"));
        }
    };
    if spec.mode == ForgetMode::Rebuild || chunks.is_empty() {
        empty_memory(&mut tools);
    }
    // The ledger recorded names no forgotten rollout, though the agent
    // is told of them under `removed`; a failed run's record keeps none either.
    let mut ledger = selection.clone();
    ledger.removed.retain(|item| !ids.iter().any(|id| id.as_str() == item.rollout_id));
    log.selection = Some(ledger.clone());
    if chunks.is_empty() || layout.config.generate.is_none() {
        // Nothing left to consolidate, or no model config to do it with.
        tools.write_owned(&format!("{memories}/raw_memories.md"), &raw_memories_md(&chunks));
    } else {
        let consolidated = consolidate(ctx, claimed, &mut tools, &selection, &chunks, log).await;
        log.files_changed = changed(&tools);
        consolidated?;
    }
    log.files_changed = changed(&tools);

    Ok(succeeded(tools, &memories, &ledger, log))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_of_a_rollout_are_found_under_any_slug_but_not_another_rollouts() {
        let names: Vec<String> =
            ["a_first.md", "a_b_note.md", "ab_x.md", "a_old.md", "a_first.md.tmp", "b_x.md"].map(String::from).to_vec();
        let a = [RolloutId::parse("a").unwrap()];
        let found = summaries_of(&names, &a, &["a_b_note.md".to_owned()]);
        assert_eq!(found, ["a_first.md", "a_old.md"]);
        let both = [RolloutId::parse("a").unwrap(), RolloutId::parse("b").unwrap()];
        assert_eq!(summaries_of(&names, &both, &[]).len(), 4);
        assert!(summaries_of(&names, &[RolloutId::parse("c").unwrap()], &[]).is_empty());
    }
}
