//! The ingest service: segments from the API to the disk and the database
//! (SPEC §2.2), in groups. Appends that arrive while a group is being written
//! wait in a queue and form the next group: one transaction locks their
//! sessions and rollouts and says where each line goes, the lines are written
//! and synced to disk together, and one commit records them all. A lone append
//! is a group of one and never waits for company.
//!
//! A 201 is sent only after the commit. A crash anywhere leaves lines beyond
//! their rollouts' committed lengths at most, and such a tail is cut before
//! the next append or read.

mod lines;

use crate::domain::ids::{LayoutName, WorkspaceName};
use crate::store::{AppendOutcome, AppendRequest, AppendStart, DynStore, Store, StoreError, TenantId};
use crate::workspace::{PathError, Volumes};
use lines::{file_lines, journal_group, write_lines};
use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The group's transaction failed: none of its appends was recorded.
    #[error("the appends' database transaction failed")]
    Store(#[source] Arc<StoreError>),
    #[error("writing the rollout file failed")]
    Disk(#[from] std::io::Error),
    #[error("the rollout path was refused")]
    Path(#[from] PathError),
}

impl From<StoreError> for IngestError {
    fn from(err: StoreError) -> Self {
        Self::Store(Arc::new(err))
    }
}

type Answer = Result<AppendOutcome, IngestError>;

/// The most segments one transaction takes (but a batch of more goes in
/// one, alone). Bigger groups hold their rows' locks longer and gain little:
/// the commit's cost is shared already.
pub const MAX_GROUP: usize = 64;

/// While a group is under way, the next one starts once this many appends
/// wait. A group pays its transaction's round trips and a sync whatever its
/// size; with none starting before a whole `MAX_GROUP` waited, 32 clients
/// made one group of 16 at a time, each waiting for the last one's commit.
/// Starting at 16, two groups overlap (one syncs and commits while the next
/// locks its rows): Postgres, 2 cores, 32 clients, seven interleaved pairs:
/// 3,700–4,550 segments/s before, 3,750–5,160 after (median 3,990 → 4,670),
/// the CPU a segment costs no higher. Starting the next group at once instead
/// made groups of 9 and cost Postgres half as much again per segment.
const NEXT_GROUP_FROM: usize = 16;

/// The queue in front of the ingest service; cheap to clone.
#[derive(Clone)]
pub struct AppendQueue {
    shared: Arc<Shared>,
}

struct Shared {
    store: DynStore,
    volumes: Volumes,
    in_flight: usize,
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    waiting: VecDeque<QueuedAppend>,
    /// Groups under way.
    running: usize,
    /// The keys of the groups under way: no other group may share one.
    busy: HashSet<GroupKey>,
}

struct QueuedAppend {
    req: AppendRequest,
    /// What it must not share with another group under way, found once.
    keys: Arc<[GroupKey]>,
    reply: oneshot::Sender<Answer>,
}

impl AppendQueue {
    pub fn new(store: DynStore, volumes: Volumes) -> Self {
        let in_flight = groups_in_flight(store.as_ref());
        Self { shared: Arc::new(Shared { store, volumes, in_flight, state: Mutex::default() }) }
    }

    /// Appends one segment durably: when this returns `Appended`, the line
    /// is on disk and its committed length is in the database. Each group
    /// runs in a task of its own, started by the append that finds room for
    /// it or by the group before it, so an append whose caller goes away is
    /// still carried out, and a lone append costs no hand-over to another
    /// task's thread.
    pub async fn append(&self, req: AppendRequest) -> Answer {
        let (reply, answer) = oneshot::channel();
        let keys = GroupKey::of(&req);
        self.shared.lock().waiting.push_back(QueuedAppend { req, keys, reply });
        start_groups(&self.shared);
        answer.await.map_err(|_| stopped())?
    }

    /// How busy the queue is now.
    pub fn load(&self) -> QueueLoad {
        let state = self.shared.lock();
        QueueLoad { waiting: state.waiting.len(), groups_running: state.running }
    }
}

/// Appends waiting for a group, and groups under way. Appends waiting while
/// every group is under way mean the database or the disk is the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLoad {
    pub waiting: usize,
    pub groups_running: usize,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // The state is consistent between statements; a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn stopped() -> IngestError {
    IngestError::Disk(std::io::Error::other("the ingest service has stopped"))
}

/// Starts what is waiting, as groups, while fewer than `in_flight` run.
fn start_groups(shared: &Arc<Shared>) {
    let mut guard = shared.lock();
    let state = &mut *guard;
    while state.running < shared.in_flight {
        if state.running > 0 && state.waiting.len() < NEXT_GROUP_FROM {
            // A group under way: what waits goes in the next one, which is
            // then bigger, unless enough wait already.
            return;
        }
        let group =
            next_group(&mut state.waiting, MAX_GROUP, |q| q.req.segments.len(), |q| q.keys.clone(), &state.busy);
        if group.is_empty() {
            return;
        }
        let keys: Vec<GroupKey> = group.iter().flat_map(|q| q.keys.iter().cloned()).collect();
        state.busy.extend(keys.iter().cloned());
        state.running += 1;
        let finished = GroupFinished { shared: shared.clone(), keys };
        tokio::spawn(async move {
            let shared = &finished.shared;
            let (reqs, replies): (Vec<_>, Vec<_>) = group.into_iter().map(|q| (q.req, q.reply)).unzip();
            crate::metrics::append_group(reqs.iter().map(|r| r.segments.len()).sum());
            let answers = append_group(&shared.store, &shared.volumes, &reqs).await;
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
            drop(finished);
        });
    }
}

/// Frees a group's keys and place when it ends — even by a panic — and
/// starts what waited for them.
struct GroupFinished {
    shared: Arc<Shared>,
    keys: Vec<GroupKey>,
}

impl Drop for GroupFinished {
    fn drop(&mut self) {
        let waiting = {
            let mut state = self.shared.lock();
            for key in &self.keys {
                state.busy.remove(key);
            }
            state.running -= 1;
            !state.waiting.is_empty()
        };
        // A runtime shutting down drops its tasks; nothing is left to start then.
        if waiting && tokio::runtime::Handle::try_current().is_ok() {
            start_groups(&self.shared);
        }
    }
}

/// How many groups may be under way at once. Where write transactions run
/// in parallel, two, the second once [`NEXT_GROUP_FROM`] appends wait: while
/// one waits for its commit (the database's log flush) the next locks its
/// rows and syncs its lines, and a group waiting for a lock another replica
/// holds does not stop the rest. Not more: three (each starting once as many
/// waited as the last one took) made groups of 9 at 32 clients, and each
/// group costs a transaction's round trips and a sync whatever its size
/// (Postgres spent 101–135 µs a segment against 85–107). Where write
/// transactions run one at a time, one: a second group would only wait for
/// the first, and the appends it took would miss the next, bigger group
/// (SQLite at 32 clients: 3,700 segments/s with one, 2,700 with two).
fn groups_in_flight(store: &dyn Store) -> usize {
    if store.one_writer() { 1 } else { 2 }
}

/// What two appends under way at once must not share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GroupKey {
    /// A rollout: two lines would be given the same place. The workspace is
    /// left out (it is known only once the session is read), which keeps
    /// apart more than it must, never less.
    Rollout(TenantId, LayoutName, String),
    IdempotencyKey(TenantId, String),
    /// A session: one group may append to several of its rollouts, but two
    /// groups under way would wait for each other's lock on its row.
    Session(TenantId, String),
}

impl GroupKey {
    /// Each distinct key of an append, in a time linear in its segments.
    fn of(req: &AppendRequest) -> Arc<[GroupKey]> {
        let mut keys: HashSet<GroupKey> = HashSet::new();
        keys.insert(GroupKey::Session(req.tenant_id, req.session_id.to_string()));
        for s in &req.segments {
            keys.insert(GroupKey::Rollout(req.tenant_id, s.layout_name.clone(), s.segment.rollout_id.to_string()));
        }
        if let Some(claim) = &req.idempotency {
            keys.insert(GroupKey::IdempotencyKey(req.tenant_id, claim.key.clone()));
        }
        keys.into_iter().collect()
    }

    fn shared_within_a_group(&self) -> bool {
        matches!(self, GroupKey::Session(..))
    }
}

/// Takes waiting appends, oldest first, while their `size` (segments) adds
/// up to at most `max`, but always the first one that may go. Left in the
/// queue (in their order) are those that share a key with a group under way
/// (`busy`), with one taken before them, or with one left before them: so
/// appends to one rollout or session keep their order.
pub fn next_group<T>(
    waiting: &mut VecDeque<T>,
    max: usize,
    size: impl Fn(&T) -> usize,
    keys: impl Fn(&T) -> Arc<[GroupKey]>,
    busy: &HashSet<GroupKey>,
) -> Vec<T> {
    let mut taken = HashSet::new();
    let mut left_keys = HashSet::new();
    let mut group = Vec::new();
    let mut group_size = 0;
    let mut left = VecDeque::new();
    while let Some(item) = waiting.pop_front() {
        let item_keys = keys(&item);
        let item_size = size(&item);
        let free = (group.is_empty() || group_size + item_size <= max)
            && item_keys.iter().all(|k| {
                !busy.contains(k) && !left_keys.contains(k) && (k.shared_within_a_group() || !taken.contains(k))
            });
        if free {
            taken.extend(item_keys.iter().cloned());
            group_size += item_size;
            group.push(item);
        } else {
            left_keys.extend(item_keys.iter().cloned());
            left.push_back(item);
        }
    }
    *waiting = left;
    group
}

/// Every replica locks a group's existing sessions, then their existing
/// rollouts, each kind in one order. Groups of two replicas that open one new
/// rollout at once can still wait for each other in a cycle; the database then
/// fails one of them, and nothing of it is kept, so it is made again, up to
/// this many times. So is a group that another took past its tenant's
/// storage limit while it was being made.
const DEADLOCK_RETRIES: u32 = 3;

/// Appends a group: one transaction, the lines written and synced together,
/// one commit. Answers come in the order of `reqs`. An append whose line could
/// not be written fails alone: the transaction is rolled back and the rest
/// are carried out again without it, so nothing of it is left behind.
pub async fn append_group(store: &DynStore, volumes: &Volumes, reqs: &[AppendRequest]) -> Vec<Answer> {
    let mut answers: Vec<Option<Answer>> = reqs.iter().map(|_| None).collect();
    let mut pending: Vec<usize> = (0..reqs.len()).collect();
    pending.sort_by(|&a, &b| lock_order(&reqs[a]).cmp(&lock_order(&reqs[b])));
    let mut deadlocks = 0;
    while !pending.is_empty() {
        match try_group(store, volumes, reqs, &pending).await {
            GroupResult::Failed(err) if err.is_deadlock() && deadlocks < DEADLOCK_RETRIES => {
                deadlocks += 1;
                tracing::info!(
                    appends = pending.len(),
                    "a group of appends was failed to break a deadlock; making it again"
                );
            }
            GroupResult::Failed(StoreError::StorageRaced) if deadlocks < DEADLOCK_RETRIES => {
                deadlocks += 1;
                tracing::info!(
                    appends = pending.len(),
                    "a tenant's storage changed under a group of appends; making it again"
                );
            }
            GroupResult::Committed(outcomes) => {
                for (i, outcome) in pending.iter().zip(outcomes) {
                    answers[*i] = Some(Ok(outcome));
                }
                break;
            }
            GroupResult::Failed(err) => {
                let err = Arc::new(err);
                for i in &pending {
                    answers[*i] = Some(Err(IngestError::Store(err.clone())));
                }
                break;
            }
            GroupResult::NotWritten(failures) => {
                pending.retain(|i| !failures.iter().any(|(f, _)| f == i));
                for (i, err) in failures {
                    answers[i] = Some(Err(err));
                }
            }
        }
    }
    answers.into_iter().map(|a| a.expect("every append of a group is answered")).collect()
}

fn lock_order(req: &AppendRequest) -> (TenantId, &str, &str, &str) {
    let first = req.segments.first();
    let layout = first.map_or("", |s| s.layout_name.as_str());
    (req.tenant_id, req.session_id.as_str(), layout, first.map_or("", |s| s.segment.rollout_id.as_str()))
}

enum GroupResult {
    /// One outcome per pending append, in their order.
    Committed(Vec<AppendOutcome>),
    Failed(StoreError),
    /// These appends (by request) could not be written; nothing was committed.
    NotWritten(Vec<(usize, IngestError)>),
}

async fn try_group(store: &DynStore, volumes: &Volumes, reqs: &[AppendRequest], pending: &[usize]) -> GroupResult {
    let group: Vec<&AppendRequest> = pending.iter().map(|&i| &reqs[i]).collect();
    let mut batch = match store.begin_appends(&group).await {
        Ok(batch) => batch,
        Err(err) => return GroupResult::Failed(err),
    };
    let mut failures = Vec::new();
    let mut files = Vec::new();
    let mut outcomes = Vec::with_capacity(group.len());
    // Most of a group goes to a few workspaces: each is confined once.
    let mut roots: Vec<((TenantId, &WorkspaceName), PathBuf)> = Vec::new();
    for (place, start) in batch.starts().iter().enumerate() {
        let position = match start {
            AppendStart::Done(outcome) => {
                outcomes.push(outcome.clone());
                continue;
            }
            AppendStart::Write(position) => position,
        };
        let req = group[place];
        let workspace = (req.tenant_id, &position.workspace);
        let root = match roots.iter().find(|(w, _)| *w == workspace) {
            Some((_, root)) => Ok(root.clone()),
            None => volumes
                .workspace_root(req.tenant_id, &position.workspace)
                .inspect(|root| roots.push((workspace, root.clone()))),
        };
        match root {
            Ok(root) => files.extend(file_lines(place, &root, req, position)),
            Err(err) => failures.push((pending[place], err.into())),
        }
        let receipts = position.places.iter().map(|p| p.receipt.clone()).collect();
        outcomes.push(AppendOutcome::Appended { receipts, opened_session: position.opened_session });
    }
    if !failures.is_empty() {
        return GroupResult::NotWritten(failures);
    }
    if let Some(bucket) = volumes.bucket() {
        return journal_group(batch, bucket, store, &files, outcomes).await;
    }
    // The rows are updated while the lines are written and synced: the
    // commit, which alone makes the updates count, waits for both.
    let (synced, recorded) = tokio::join!(tokio::task::spawn_blocking(move || write_lines(files)), batch.record());
    let synced = match synced {
        Ok(synced) => synced,
        Err(panicked) => {
            return GroupResult::Failed(StoreError::Corrupt(format!("writing the rollout files panicked: {panicked}")));
        }
    };
    for (place, expected, result) in synced {
        match result {
            Ok(new_len) if new_len == expected => {}
            Ok(new_len) => {
                return GroupResult::Failed(StoreError::Corrupt(format!(
                    "a rollout file grew to {new_len} bytes, not the {expected} recorded"
                )));
            }
            Err(err) => {
                if !failures.iter().any(|(f, _)| *f == pending[place]) {
                    failures.push((pending[place], err));
                }
            }
        }
    }
    if !failures.is_empty() {
        return GroupResult::NotWritten(failures);
    }
    if let Err(err) = recorded {
        return GroupResult::Failed(err);
    }
    match batch.commit().await {
        Ok(()) => GroupResult::Committed(outcomes),
        Err(err) => GroupResult::Failed(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> TenantId {
        uuid::Uuid::nil()
    }

    /// An append to rollout `r` of session `s`.
    fn keys((session, rollout): &(&str, &str)) -> Arc<[GroupKey]> {
        Arc::new([
            GroupKey::Rollout(tenant(), LayoutName::parse("default").unwrap(), rollout.to_string()),
            GroupKey::Session(tenant(), session.to_string()),
        ])
    }

    fn one<T>(_: &T) -> usize {
        1
    }

    fn idle() -> HashSet<GroupKey> {
        HashSet::new()
    }

    #[test]
    fn a_group_takes_the_oldest_appends_up_to_its_size() {
        let mut waiting: VecDeque<(&str, &str)> = [("s1", "a"), ("s2", "b"), ("s3", "c"), ("s4", "d")].into();
        assert_eq!(next_group(&mut waiting, 3, one, keys, &idle()), [("s1", "a"), ("s2", "b"), ("s3", "c")]);
        assert_eq!(waiting, [("s4", "d")]);
    }

    #[test]
    fn appends_to_one_rollout_go_in_later_groups_in_their_order() {
        let mut waiting: VecDeque<(&str, &str)> =
            [("s1", "a"), ("s2", "b"), ("s3", "a"), ("s4", "c"), ("s5", "a")].into();
        assert_eq!(next_group(&mut waiting, 10, one, keys, &idle()), [("s1", "a"), ("s2", "b"), ("s4", "c")]);
        assert_eq!(next_group(&mut waiting, 10, one, keys, &idle()), [("s3", "a")]);
        assert_eq!(next_group(&mut waiting, 10, one, keys, &idle()), [("s5", "a")]);
        assert!(waiting.is_empty());
    }

    #[test]
    fn one_group_appends_to_several_rollouts_of_a_session() {
        let mut waiting: VecDeque<(&str, &str)> = [("s1", "a"), ("s1", "b")].into();
        assert_eq!(next_group(&mut waiting, 10, one, keys, &idle()), [("s1", "a"), ("s1", "b")]);
    }

    #[test]
    fn a_group_under_way_holds_back_its_sessions_and_rollouts() {
        let busy: HashSet<GroupKey> = keys(&("s1", "a")).iter().cloned().collect();
        let mut waiting: VecDeque<(&str, &str)> = [("s1", "b"), ("s2", "a"), ("s3", "c"), ("s1", "d")].into();
        assert_eq!(next_group(&mut waiting, 10, one, keys, &busy), [("s3", "c")]);
        assert_eq!(waiting, [("s1", "b"), ("s2", "a"), ("s1", "d")]);
    }

    #[test]
    fn an_append_past_the_size_keeps_later_ones_of_its_rollout_behind_it() {
        let mut waiting: VecDeque<(&str, &str)> = [("s1", "a"), ("s2", "b"), ("s3", "b")].into();
        assert_eq!(next_group(&mut waiting, 1, one, keys, &idle()), [("s1", "a")]);
        assert_eq!(waiting, [("s2", "b"), ("s3", "b")]);
    }

    #[test]
    fn one_idempotency_key_never_appears_twice_in_a_group() {
        let keyed = |k: &&str| Arc::from([GroupKey::IdempotencyKey(tenant(), k.to_string())]);
        let mut waiting: VecDeque<&str> = ["k1", "k1", "k2"].into();
        assert_eq!(next_group(&mut waiting, 10, one, keyed, &idle()), ["k1", "k2"]);
        assert_eq!(waiting, ["k1"]);
    }

    #[test]
    fn a_group_takes_batches_up_to_its_size_in_segments_and_a_bigger_one_alone() {
        // (session, rollout, segments)
        let sized = |(_, _, n): &(&str, &str, usize)| *n;
        let keyed = |(s, r, _): &(&str, &str, usize)| keys(&(s, r));
        let mut waiting: VecDeque<(&str, &str, usize)> =
            [("s1", "a", 40), ("s2", "b", 24), ("s3", "c", 1), ("s4", "d", 300), ("s5", "e", 2)].into();
        assert_eq!(next_group(&mut waiting, 64, sized, keyed, &idle()), [("s1", "a", 40), ("s2", "b", 24)]);
        assert_eq!(next_group(&mut waiting, 64, sized, keyed, &idle()), [("s3", "c", 1), ("s5", "e", 2)]);
        assert_eq!(next_group(&mut waiting, 64, sized, keyed, &idle()), [("s4", "d", 300)]);
        assert!(waiting.is_empty());
    }
}
