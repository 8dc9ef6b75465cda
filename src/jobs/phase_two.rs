//! A phase-two attempt (R-P2, SPEC §4): select the newest raw memories,
//! rebuild `raw_memories.md`, let the consolidation agent (or the extractive
//! provider) edit a private working copy of the memory folder, and on success
//! hand over its changes and the selection to be published at once. A failed
//! attempt changes no file.

use super::{Attempt, AttemptError, Completion, WorkerContext};
use crate::bucket::rollouts::RolloutError;
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use crate::domain::layout::ValidLayout;
use crate::domain::page::{MAX_LIMIT, PageRequest};
use crate::domain::time::py_isoformat;
use crate::llm::{AgentItem, AgentRequest, FailureClass, ModelError, Provider, TokenUsage};
use crate::pipeline::extractive;
use crate::pipeline::prompts::{PHASE_TWO, extra_prompt_section, render};
use crate::pipeline::selection::{
    PhaseTwoSelection, SelectionItem, SelectionPolicy, build_selection, prior_from_document, raw_memories_md,
    render_selection_block, selection_document, selection_file,
};
use crate::store::{
    ClaimedJob, JobFilter, JobKind, JobOutcome, JobState, PhaseTwoReport, PhaseTwoRun, RunState, Store, TenantId,
};
use crate::tools::{MemoryTools, tool_specs};
use crate::workspace::confine;
use crate::workspace::publish::FileChanges;
use chrono::{DateTime, Utc};
use futures_util::{StreamExt, TryStreamExt};
use serde_json::json;
use uuid::Uuid;

const AGENT_INSTRUCTIONS: &str = "You maintain the long-term memory folder of an AI agent. Do what the user message asks with the tools you have; when the memory files are done, answer in plain text without calling a tool.";

/// Everything the run record needs, filled in as the attempt goes.
pub(super) struct RunLog {
    pub run_id: Uuid,
    pub started_at: DateTime<Utc>,
    pub selection: Option<PhaseTwoSelection>,
    pub files_changed: Vec<String>,
    pub usage: TokenUsage,
    pub turns: i64,
}

impl RunLog {
    pub fn new() -> Self {
        Self {
            run_id: Uuid::new_v4(),
            started_at: Utc::now(),
            selection: None,
            files_changed: Vec::new(),
            usage: TokenUsage::default(),
            turns: 0,
        }
    }

    pub fn report(
        &self,
        claimed: &ClaimedJob,
        state: RunState,
        error: Option<String>,
        selection_doc: Option<serde_json::Value>,
    ) -> PhaseTwoReport {
        let count = |f: fn(&PhaseTwoSelection) -> usize| self.selection.as_ref().map_or(0, f) as i64;
        PhaseTwoReport {
            run: PhaseTwoRun {
                run_id: self.run_id,
                kind: claimed.job.kind.as_str().to_owned(),
                job_id: claimed.job.job_id,
                session_id: claimed.job.session_id.as_ref().map_or_else(String::new, |s| s.as_str().to_owned()),
                state,
                selected: count(|s| s.selected.len()),
                added: count(PhaseTwoSelection::added_count),
                retained: count(|s| s.retained.len()),
                removed: count(|s| s.removed.len()),
                files_changed: self.files_changed.clone(),
                usage: self.usage,
                turns: self.turns,
                error,
                started_at: self.started_at,
                finished_at: Utc::now(),
                sessions: claimed.job.sessions.clone(),
                restored_from: None,
                rollout_id: None,
                reason: None,
                redactions: Default::default(),
                ledger: self.selection.as_ref().map(|s| {
                    json!({
                        "added": s.added_ids(),
                        "retained": s.retained_ids(),
                        "removed": s.removed.iter().map(|r| r.rollout_id.clone()).collect::<Vec<_>>(),
                    })
                }),
            },
            selection: selection_doc,
            history: None,
        }
    }
}

fn model_failure(e: ModelError) -> AttemptError {
    let message = format!("phase-two model call failed: {}", e.message);
    let retry_after = if e.class == FailureClass::Transient { e.retry_after } else { None };
    AttemptError::Retryable { message, retry_after, usage: e.usage, token_limit: None }
}

/// Phase two of one layout in one workspace (R-P2).
pub struct PhaseTwo;

#[async_trait::async_trait]
impl super::JobRunner for PhaseTwo {
    async fn run(&self, ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt {
        let mut log = RunLog::new();
        let (result, report) = match attempt(ctx, claimed, &mut log).await {
            Ok((completion, document)) => {
                let state = if matches!(completion.outcome, JobOutcome::Skipped) {
                    RunState::Skipped
                } else {
                    RunState::Succeeded
                };
                let report = log.report(claimed, state, None, document);
                (Ok(completion), report)
            }
            Err(e) => {
                let report = log.report(claimed, RunState::Failed, Some(e.message().to_owned()), None);
                (Err(e), report)
            }
        };
        crate::metrics::phase_two_run(report.run.state.as_str(), report.run.turns, report.run.files_changed.len());
        (result, Some(report))
    }
}

fn skipped(usage: TokenUsage) -> (Completion, Option<serde_json::Value>) {
    (Completion::without_files(JobOutcome::Skipped, usage, Default::default()), None)
}

async fn attempt(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    log: &mut RunLog,
) -> Result<(Completion, Option<serde_json::Value>), AttemptError> {
    let job = &claimed.job;
    let io = |what: &str, e: &dyn std::fmt::Display| AttemptError::spent(format!("{what}: {e}"), TokenUsage::default());
    let generate = super::generate_config(claimed)?;

    // SPEC §4: no model call when none of the served closes' phase-one jobs wrote a memory.
    let mut any_memory = false;
    for session in super::served_sessions(claimed) {
        let filter = JobFilter { state: None, kind: Some(JobKind::PhaseOne), session_id: Some(session), within: None };
        let phase_one = ctx
            .store
            .list_jobs(claimed.tenant_id, &filter, &PageRequest { limit: MAX_LIMIT, after: None })
            .await
            .map_err(|e| io("listing phase-one jobs failed", &e))?;
        any_memory |= phase_one.iter().any(|j| j.layout == job.layout && j.state == JobState::Succeeded);
    }
    if !any_memory {
        return Ok(skipped(TokenUsage::default()));
    }

    let copy = super::job_workspace(ctx, claimed).await?;
    let root = copy.root().to_owned();
    let layout = &claimed.layout;
    let memories = layout.memories_dir.normalized.clone();
    let policy = SelectionPolicy::of(&generate, Utc::now());
    let place = LayoutPlace::of_job(claimed, &root);
    let PhaseTwoInput { selection, chunks } = prepare_input(ctx.store.as_ref(), &place, &policy, &[], true)
        .await
        .map_err(|e| AttemptError::spent(e, TokenUsage::default()))?;
    log.selection = Some(selection.clone());
    let memory_root =
        confine(&root, &memories).map_err(|e| AttemptError::fatal(format!("memories path refused: {e}")))?;
    if chunks.is_empty() {
        return Ok(skipped(TokenUsage::default()));
    }
    super::remove_earlier_leftovers(claimed, memory_root).await?;
    conversations_into_the_copy(ctx, claimed, &root, &selection).await?;

    let mut tools =
        MemoryTools::new(root.clone(), &memories, &layout.sessions_dir.normalized).redacting(layout.redactor());
    let result = consolidate(ctx, claimed, &mut tools, &selection, &chunks, log).await;
    log.files_changed = tools.changed_files();
    if let Err(e) = result {
        log.files_changed.clear();
        return Err(e);
    }

    let (completion, document) = succeeded(tools, &memories, &selection, log);
    Ok((completion, Some(document)))
}

/// A successful consolidation's result: the working copy's changes and
/// `phase_two_selection.json` to publish, and the selection document.
pub(super) fn succeeded(
    tools: MemoryTools,
    memories: &str,
    selection: &PhaseTwoSelection,
    log: &RunLog,
) -> (Completion, serde_json::Value) {
    let written_at = py_isoformat(Utc::now());
    let document = selection_document(selection, &written_at, &log.run_id.to_string());
    let mut files = FileChanges::default();
    for (path, text) in tools.into_edits() {
        match text {
            Some(text) => files.write(path, text),
            None => files.delete(path),
        }
    }
    files.write(format!("{memories}/phase_two_selection.json"), selection_file(&selection.selected, &written_at));
    let completion = Completion {
        outcome: JobOutcome::Succeeded { raw_memory: None },
        files: Some(files),
        usage: log.usage,
        redactions: Default::default(),
        imported: None,
    };
    (completion, document)
}

/// Phase two's input: the selection and the selected raw memories' text.
/// Where rollouts live in a bucket, a job's copy holds memory files only:
/// the conversations of the memories this run adds are written into it, so
/// the agent can open them as on a volume (a bounded set: not every
/// conversation of the workspace, which the copy would hold on a volume).
async fn conversations_into_the_copy(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    root: &std::path::Path,
    selection: &PhaseTwoSelection,
) -> Result<(), AttemptError> {
    let Some(bucket) = ctx.volumes.bucket() else { return Ok(()) };
    let (tenant, workspace, layout) = (claimed.tenant_id, &claimed.job.workspace, &claimed.job.layout);
    let failed = |e: &dyn std::fmt::Display| AttemptError::retryable(format!("reading a conversation failed: {e}"));
    // Futures made before they are streamed: a stream's closures over
    // borrowed items would not be `Send` for every lifetime. Each streams
    // its conversation into the copy: none is held in memory whole.
    let copies: Vec<_> = selection
        .selected
        .iter()
        .filter(|s| !selection.retained.contains(&s.rollout_id))
        .map(|item| async move {
            let Some(rollout) = RolloutId::parse(&item.rollout_id) else { return Ok(()) };
            let at = crate::store::journal_records::RolloutAt { tenant, workspace, layout, rollout: &rollout };
            let path = confine(root, &item.rollout_path)
                .map_err(|e| AttemptError::fatal(format!("rollout path refused: {e}")))?;
            tokio::fs::create_dir_all(path.parent().unwrap_or(&path)).await.map_err(|e| failed(&e))?;
            let mut file = tokio::fs::File::create(&path).await.map_err(|e| failed(&e))?;
            let written = bucket.write_rollout(ctx.store.as_ref(), at, &item.rollout_path, u64::MAX, &mut file).await;
            let forgotten = match written {
                Ok(written) => written.is_none(),
                // Its object removed since its parts were read.
                Err(RolloutError::Objects(object_store::Error::NotFound { .. })) => true,
                Err(e) => return Err(failed(&e)),
            };
            if forgotten {
                // Forgotten meanwhile: the copy does not have it either.
                drop(file);
                tokio::fs::remove_file(&path).await.map_err(|e| failed(&e))?;
            }
            Ok::<_, AttemptError>(())
        })
        .collect();
    let mut copied = futures_util::stream::iter(copies).buffer_unordered(crate::bucket::files::REQUESTS_AT_ONCE);
    while copied.try_next().await?.is_some() {}
    Ok(())
}

pub struct PhaseTwoInput {
    pub selection: PhaseTwoSelection,
    /// One entry per selected raw memory whose file exists, newest first.
    pub chunks: Vec<String>,
}

/// One layout's memory in one workspace.
pub struct LayoutPlace<'a> {
    /// The workspace root.
    pub root: &'a std::path::Path,
    pub tenant: TenantId,
    pub workspace: &'a WorkspaceName,
    pub layout_name: &'a LayoutName,
    pub layout: &'a ValidLayout,
}

impl<'a> LayoutPlace<'a> {
    /// The layout a claimed job works on, in its workspace at `root`.
    pub fn of_job(claimed: &'a ClaimedJob, root: &'a std::path::Path) -> Self {
        let job = &claimed.job;
        Self {
            root,
            tenant: claimed.tenant_id,
            workspace: &job.workspace,
            layout_name: &job.layout,
            layout: &claimed.layout,
        }
    }
}

/// R-P2-2..4 from the raw-memory index: filter and order by the layout's
/// policy, cap, diff against the last successful selection (or against
/// none, without `against_prior`), and read the selected files. The
/// `excluded` rollouts (being forgotten) are left out.
pub async fn prepare_input(
    store: &dyn Store,
    place: &LayoutPlace<'_>,
    policy: &SelectionPolicy,
    excluded: &[RolloutId],
    against_prior: bool,
) -> Result<PhaseTwoInput, String> {
    let LayoutPlace { root, tenant, workspace, layout_name, layout } = *place;
    let index_failed = |e: crate::store::StoreError| format!("reading the raw-memory index failed: {e}");
    let rows = if policy.needs_only_newest() {
        store.newest_raw_memories(tenant, workspace, layout_name, policy.cap + excluded.len()).await
    } else {
        store.all_raw_memories(tenant, workspace, layout_name).await
    }
    .map_err(index_failed)?;
    let usage: std::collections::HashMap<String, crate::domain::index::MemoryUsage> = store
        .memory_usage(tenant, workspace, layout_name)
        .await
        .map_err(index_failed)?
        .into_iter()
        .map(|u| (u.rollout_id.clone(), u))
        .collect();
    let items: Vec<SelectionItem> = rows
        .into_iter()
        .filter(|r| !excluded.contains(&r.rollout_id))
        .map(|r| {
            let used = usage.get(r.rollout_id.as_str());
            SelectionItem {
                rollout_id: r.rollout_id.as_str().to_owned(),
                updated_at: r.updated_at,
                rollout_path: r.rollout_path,
                rollout_summary_file: r.rollout_summary_file,
                terminal_state: r.terminal_state,
                usage_count: used.map_or(0, |u| u.usage_count),
                last_usage: used.map(|u| u.last_usage),
            }
        })
        .collect();
    let prior = if against_prior {
        store
            .phase_two_selection(tenant, workspace, layout_name)
            .await
            .map_err(|e| format!("reading the last selection failed: {e}"))?
            .map(|doc| prior_from_document(&doc))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let selection = build_selection(items, policy, &prior);
    let memory_root =
        confine(root, &layout.memories_dir.normalized).map_err(|e| format!("memories path refused: {e}"))?;
    let mut chunks = Vec::with_capacity(selection.selected.len());
    for item in &selection.selected {
        let path = confine(&memory_root, &format!("raw_memories/{}.md", item.rollout_id))
            .map_err(|e| format!("raw memory path refused: {e}"))?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => chunks.push(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("reading a raw memory failed: {e}")),
        }
    }
    Ok(PhaseTwoInput { selection, chunks })
}

/// Rebuilds `raw_memories.md`, then lets the provider edit the memory files.
pub(super) async fn consolidate(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    tools: &mut MemoryTools,
    selection: &PhaseTwoSelection,
    chunks: &[String],
    log: &mut RunLog,
) -> Result<(), AttemptError> {
    let memories = claimed.layout.memories_dir.normalized.clone();
    let generate = claimed.layout.config.generate.clone().expect("checked by the caller");
    tools.write_owned(&format!("{memories}/raw_memories.md"), &raw_memories_md(chunks));
    match &ctx.provider {
        Provider::Extractive => {
            let (memory, summary) = extractive::consolidate(chunks);
            for (file, text) in [("MEMORY.md", memory), ("memory_summary.md", summary)] {
                tools.write_owned(&format!("{memories}/{file}"), &text);
            }
            log.turns = 0;
            Ok(())
        }
        Provider::Model(model) => {
            let max_turns = generate.phase_two_max_turns.max(1);
            let prompt = render(
                PHASE_TWO,
                &[
                    ("memory_root", claimed.layout.config.memories_dir.as_str()),
                    ("max_turns", &max_turns.to_string()),
                    ("phase_two_input_selection", &render_selection_block(selection)),
                    ("extra_prompt_section", &extra_prompt_section(generate.extra_prompt.as_deref())),
                ],
            );
            if ctx.settings.log_content {
                tracing::debug!(job_id = %claimed.job.job_id, prompt = %prompt, "phase-two prompt");
            }
            let specs = tool_specs();
            let mut items = vec![AgentItem::User(prompt)];
            while log.turns < max_turns {
                log.turns += 1;
                let request = AgentRequest {
                    model: generate.phase_two_model.clone(),
                    instructions: AGENT_INSTRUCTIONS.into(),
                    items: &items,
                    tools: &specs,
                    reasoning_effort: generate.phase_two_reasoning_effort.clone(),
                };
                let turn = model.agent_turn(&request).await.map_err(|e| {
                    let mut failure = model_failure(e);
                    if let AttemptError::Retryable { usage, .. } = &mut failure {
                        usage.add(log.usage);
                    }
                    failure
                })?;
                log.usage.add(turn.usage);
                if ctx.settings.log_content {
                    tracing::debug!(job_id = %claimed.job.job_id, text = %turn.text, calls = turn.calls.len(), "phase-two turn");
                }
                if turn.calls.is_empty() {
                    return Ok(());
                }
                if !turn.text.is_empty() {
                    items.push(AgentItem::Assistant(turn.text));
                }
                // The tools read the disk: off the runtime's threads.
                let calls = turn.calls.clone();
                let working_copy = std::mem::replace(tools, MemoryTools::new(Default::default(), "", ""));
                let (working_copy, outputs) = tokio::task::spawn_blocking(move || {
                    let mut tools = working_copy;
                    let outputs: Vec<AgentItem> = calls
                        .into_iter()
                        .map(|call| {
                            let output = tools.call(&call.name, &call.arguments);
                            AgentItem::Output { call, output }
                        })
                        .collect();
                    (tools, outputs)
                })
                .await
                .map_err(|e| AttemptError::spent(format!("a tool call failed: {e}"), log.usage))?;
                *tools = working_copy;
                items.extend(turn.calls.into_iter().map(AgentItem::Call));
                items.extend(outputs);
            }
            Err(AttemptError::spent(format!("phase two did not finish within its {max_turns} turns"), log.usage))
        }
    }
}
