//! Sessions and their jobs (SPEC §2.3, §5): the states they move through and
//! the jobs a close queues.

use super::ids::{LayoutName, RolloutId};
use super::memory_edit::MemoryEdit;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Open,
    Closing,
    Closed,
}

impl SessionState {
    pub const ALL: [Self; 3] = [Self::Open, Self::Closing, Self::Closed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closing => "closing",
            Self::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(Self::Open),
            "closing" => Some(Self::Closing),
            "closed" => Some(Self::Closed),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    PhaseOne,
    PhaseTwo,
    /// Puts a layout's memory back as a kept run left it; runs alone per
    /// layout, like phase two.
    Restore,
    /// Removes conversations, a workspace or a tenant (SPEC §2.7); a forget
    /// of conversations runs alone per layout, like phase two.
    Forget,
    /// Places an archive's files in an empty workspace and registers them (SPEC §2.7).
    Import,
    /// A running agent's change to its memory (SPEC §2.10); runs alone per
    /// layout, like phase two.
    Edit,
}

impl JobKind {
    pub const ALL: [Self; 6] = [Self::PhaseOne, Self::PhaseTwo, Self::Restore, Self::Forget, Self::Import, Self::Edit];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PhaseOne => "phase_one",
            Self::PhaseTwo => "phase_two",
            Self::Restore => "restore",
            Self::Forget => "forget",
            Self::Import => "import",
            Self::Edit => "edit",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "phase_one" => Some(Self::PhaseOne),
            "phase_two" => Some(Self::PhaseTwo),
            "restore" => Some(Self::Restore),
            "forget" => Some(Self::Forget),
            "import" => Some(Self::Import),
            "edit" => Some(Self::Edit),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Skipped,
    Failed,
    /// Ended by a forget of its workspace or tenant before it finished.
    Cancelled,
}

impl JobState {
    pub const ALL: [Self; 6] =
        [Self::Queued, Self::Running, Self::Succeeded, Self::Skipped, Self::Failed, Self::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "queued" => Some(Self::Queued),
            "running" => Some(Self::Running),
            "succeeded" => Some(Self::Succeeded),
            "skipped" => Some(Self::Skipped),
            "failed" => Some(Self::Failed),
            "cancelled" => Some(Self::Cancelled),
            _ => None,
        }
    }
}

/// How a phase-two, restore or forget run ended, as its run record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Succeeded,
    /// A phase two with nothing to consolidate.
    Skipped,
    Failed,
}

/// A run's state is its job's final state, and is written the same way.
impl RunState {
    fn job_state(self) -> JobState {
        match self {
            Self::Succeeded => JobState::Succeeded,
            Self::Skipped => JobState::Skipped,
            Self::Failed => JobState::Failed,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.job_state().as_str()
    }

    pub fn parse(s: &str) -> Option<Self> {
        match JobState::parse(s)? {
            JobState::Succeeded => Some(Self::Succeeded),
            JobState::Skipped => Some(Self::Skipped),
            JobState::Failed => Some(Self::Failed),
            _ => None,
        }
    }
}

/// What a forget job removes (SPEC §2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "snake_case")]
pub enum ForgetScope {
    /// Some conversations of one layout in one workspace.
    Rollouts,
    Workspace,
    Tenant,
}

impl ForgetScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rollouts => "rollouts",
            Self::Workspace => "workspace",
            Self::Tenant => "tenant",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "rollouts" => Some(Self::Rollouts),
            "workspace" => Some(Self::Workspace),
            "tenant" => Some(Self::Tenant),
            _ => None,
        }
    }
}

/// How the memory is consolidated without a forgotten conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "snake_case")]
pub enum ForgetMode {
    /// A phase two told to take out what came only from the forgotten ones.
    Scrub,
    /// The memory made again from the remaining raw memories alone.
    Rebuild,
}

impl ForgetMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scrub => "scrub",
            Self::Rebuild => "rebuild",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "scrub" => Some(Self::Scrub),
            "rebuild" => Some(Self::Rebuild),
            _ => None,
        }
    }
}

/// A forget job's target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "StoredForget")]
pub struct ForgetSpec {
    pub scope: ForgetScope,
    pub mode: ForgetMode,
    /// The conversations, for a forget of conversations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rollout_ids: Vec<RolloutId>,
}

/// A forget's target as stored, checked into a [`ForgetSpec`].
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct StoredForget {
    scope: String,
    mode: String,
    #[serde(default)]
    rollout_ids: Vec<String>,
}

impl TryFrom<StoredForget> for ForgetSpec {
    type Error = String;

    fn try_from(stored: StoredForget) -> Result<Self, String> {
        let rollout_ids = stored
            .rollout_ids
            .iter()
            .map(|id| RolloutId::parse(id).ok_or_else(|| format!("not a rollout id: {id:?}")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            scope: ForgetScope::parse(&stored.scope)
                .ok_or_else(|| format!("not a forget scope: {:?}", stored.scope))?,
            mode: ForgetMode::parse(&stored.mode).ok_or_else(|| format!("not a forget mode: {:?}", stored.mode))?,
            rollout_ids,
        })
    }
}

/// What a job does beyond its kind, kept whole in one column (`jobs.spec`).
/// Externally tagged on purpose: the variant is the key, so reading a spec
/// never buffers its content the way an internally tagged enum does, which
/// is where `arbitrary_precision` numbers go wrong (serde-rs/json #1108).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobSpec {
    PhaseOne,
    PhaseTwo,
    Import,
    /// The run whose memory a restore puts back.
    Restore {
        run_id: uuid::Uuid,
    },
    Forget(ForgetSpec),
    /// `None` once the edit is published: its text is not kept (a failed
    /// edit keeps it, to be retried).
    Edit(Option<Box<MemoryEdit>>),
}

impl JobSpec {
    pub fn kind(&self) -> JobKind {
        match self {
            Self::PhaseOne => JobKind::PhaseOne,
            Self::PhaseTwo => JobKind::PhaseTwo,
            Self::Import => JobKind::Import,
            Self::Restore { .. } => JobKind::Restore,
            Self::Forget(_) => JobKind::Forget,
            Self::Edit(_) => JobKind::Edit,
        }
    }

    /// The column's text.
    pub fn stored(&self) -> String {
        serde_json::to_string(self).expect("a job spec serializes")
    }

    /// The spec a row of `kind` holds; it must be of that kind.
    pub fn from_stored(kind: JobKind, stored: &str) -> Result<Self, String> {
        let spec: Self = serde_json::from_str(stored).map_err(|e| format!("a job's spec does not parse: {e}"))?;
        if spec.kind() != kind {
            return Err(format!("a {} job holds the spec of a {} job", kind.as_str(), spec.kind().as_str()));
        }
        Ok(spec)
    }
}

/// The jobs one close queues (SPEC §2.3): a phase-one job per touched rollout
/// and layout, and a phase-two job per touched layout. `touched` lists
/// `(layout, rollout)` pairs.
pub fn jobs_for_close(touched: &[(LayoutName, RolloutId)]) -> Vec<(JobKind, LayoutName, Option<RolloutId>)> {
    let mut jobs = Vec::new();
    let mut layouts: Vec<&LayoutName> = Vec::new();
    for (layout, rollout) in touched {
        jobs.push((JobKind::PhaseOne, layout.clone(), Some(rollout.clone())));
        if !layouts.contains(&layout) {
            layouts.push(layout);
        }
    }
    for layout in layouts {
        jobs.push((JobKind::PhaseTwo, layout.clone(), None));
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::memory_edit::{EditChange, MemoryCommand};

    /// Every kind's spec reads back as it was written, numbers included
    /// (`arbitrary_precision` is on; an insert's line is a number).
    #[test]
    fn job_specs_round_trip_through_their_column() {
        let insert = MemoryCommand::Insert { path: "MEMORY.md".into(), insert_line: 12, insert_text: "- x".into() };
        let edit = MemoryEdit {
            change: EditChange::Operations(vec![insert]),
            expect: [("MEMORY.md".to_owned(), None)].into(),
            session_id: Some("s".into()),
            rollout_id: None,
            reason: Some("why".into()),
        };
        let forget = ForgetSpec {
            scope: ForgetScope::Rollouts,
            mode: ForgetMode::Rebuild,
            rollout_ids: vec![RolloutId::parse("chat-1").unwrap()],
        };
        let specs = [
            JobSpec::PhaseOne,
            JobSpec::PhaseTwo,
            JobSpec::Import,
            JobSpec::Restore { run_id: uuid::Uuid::nil() },
            JobSpec::Forget(forget),
            JobSpec::Edit(Some(Box::new(edit))),
            JobSpec::Edit(None),
        ];
        for spec in specs {
            assert_eq!(JobSpec::from_stored(spec.kind(), &spec.stored()), Ok(spec.clone()), "{}", spec.stored());
        }
        assert_eq!(JobSpec::PhaseOne.stored(), "\"phase_one\"");
        assert_eq!(JobSpec::Edit(None).stored(), r#"{"edit":null}"#);
        assert!(JobSpec::from_stored(JobKind::Forget, "\"phase_one\"").unwrap_err().contains("phase_one"));
        let stored = r#"{"forget":{"scope":"rollouts","mode":"scrub","rollout_ids":["../x"]}}"#;
        assert!(JobSpec::from_stored(JobKind::Forget, stored).is_err(), "ids are checked");
    }

    #[test]
    fn a_close_queues_phase_one_per_rollout_then_phase_two_per_layout() {
        let l = |s| LayoutName::parse(s).unwrap();
        let r = |s| RolloutId::parse(s).unwrap();
        let jobs = jobs_for_close(&[(l("a"), r("x")), (l("b"), r("x")), (l("a"), r("y"))]);
        let kinds: Vec<(JobKind, &str, Option<&str>)> =
            jobs.iter().map(|(k, l, r)| (*k, l.as_str(), r.as_ref().map(RolloutId::as_str))).collect();
        assert_eq!(
            kinds,
            [
                (JobKind::PhaseOne, "a", Some("x")),
                (JobKind::PhaseOne, "b", Some("x")),
                (JobKind::PhaseOne, "a", Some("y")),
                (JobKind::PhaseTwo, "a", None),
                (JobKind::PhaseTwo, "b", None),
            ]
        );
        assert!(jobs_for_close(&[]).is_empty());
    }

    #[test]
    fn states_round_trip_and_a_session_settles_by_its_failures() {
        for s in [SessionState::Open, SessionState::Closing, SessionState::Closed] {
            assert_eq!(SessionState::parse(s.as_str()), Some(s));
        }
        for s in [
            JobState::Queued,
            JobState::Running,
            JobState::Succeeded,
            JobState::Skipped,
            JobState::Failed,
            JobState::Cancelled,
        ] {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        for s in [RunState::Succeeded, RunState::Skipped, RunState::Failed] {
            assert_eq!(RunState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str(), "the API shows what the database stores");
        }
        assert_eq!(RunState::parse("running"), None, "a run is recorded when it has ended");
        for k in JobKind::ALL {
            assert_eq!(JobKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
            assert_eq!(serde_json::from_value::<JobKind>(k.as_str().into()).unwrap(), k);
        }
        for s in [ForgetScope::Rollouts, ForgetScope::Workspace, ForgetScope::Tenant] {
            assert_eq!(ForgetScope::parse(s.as_str()), Some(s));
        }
        assert_eq!(ForgetMode::parse("scrub"), Some(ForgetMode::Scrub));
        assert_eq!(ForgetMode::parse("rebuild"), Some(ForgetMode::Rebuild));
        assert_eq!(ForgetMode::parse("erase"), None);
        assert_eq!(JobKind::parse("phase_three"), None);
    }
}
