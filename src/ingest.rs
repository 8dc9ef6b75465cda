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

use crate::domain::ids::LayoutName;
use crate::store::{
    AppendOutcome, AppendPosition, AppendRequest, AppendStart, DynStore, SegmentReceipt, Store, StoreError, TenantId, WrittenSegment,
};
use crate::domain::layout::ValidLayout;
use crate::workspace::{LineAppend, PathError, Volumes, append_all_durably, confine, ensure_layout};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

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

/// The most appends one transaction takes. Bigger groups hold their rows'
/// locks longer and gain little: the commit's cost is shared already.
pub const MAX_GROUP: usize = 64;

/// The queue in front of the ingest service; cheap to clone.
#[derive(Clone)]
pub struct AppendQueue {
    sender: mpsc::Sender<QueuedAppend>,
}

struct QueuedAppend {
    req: AppendRequest,
    reply: oneshot::Sender<Answer>,
}

impl AppendQueue {
    /// Starts the task that writes the queued appends; it ends when the last
    /// clone of the queue is dropped.
    pub fn start(store: DynStore, volumes: Volumes) -> Self {
        let (sender, receiver) = mpsc::channel(4 * MAX_GROUP);
        tokio::spawn(write_groups(store, volumes, receiver));
        Self { sender }
    }

    /// Appends one segment durably: when this returns `Appended`, the line
    /// is on disk and its committed length is in the database. An append
    /// whose caller goes away once it is queued is still carried out.
    pub async fn append(&self, req: AppendRequest) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.sender.send(QueuedAppend { req, reply }).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> IngestError {
    IngestError::Disk(std::io::Error::other("the ingest service has stopped"))
}

async fn write_groups(store: DynStore, volumes: Volumes, mut receiver: mpsc::Receiver<QueuedAppend>) {
    let mut waiting = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match receiver.recv().await {
                Some(queued) => waiting.push_back(queued),
                None => return,
            }
        }
        while waiting.len() < 2 * MAX_GROUP
            && let Ok(queued) = receiver.try_recv()
        {
            waiting.push_back(queued);
        }
        let group = next_group(&mut waiting, MAX_GROUP, |q| GroupKey::of(&q.req));
        let (reqs, replies): (Vec<_>, Vec<_>) = group.into_iter().map(|q| (q.req, q.reply)).unzip();
        crate::metrics::append_group(reqs.len());
        let answers = append_group(store.as_ref(), &volumes, &reqs).await;
        for (reply, answer) in replies.into_iter().zip(answers) {
            let _ = reply.send(answer);
        }
    }
}

/// What two appends of one group must not share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GroupKey {
    /// A rollout: two lines would be given the same place. The workspace is
    /// left out (it is known only once the session is read), which keeps
    /// apart more than it must, never less.
    Rollout(TenantId, LayoutName, String),
    IdempotencyKey(TenantId, String),
}

impl GroupKey {
    fn of(req: &AppendRequest) -> Vec<GroupKey> {
        let mut keys = vec![GroupKey::Rollout(req.tenant_id, req.layout_name.clone(), req.segment.rollout_id.to_string())];
        if let Some(claim) = &req.idempotency {
            keys.push(GroupKey::IdempotencyKey(req.tenant_id, claim.key.clone()));
        }
        keys
    }
}

/// Takes up to `max` of the waiting appends, oldest first, leaving in the
/// queue (in their order) those that share a key with one taken before them:
/// they go in a later group, so appends to one rollout keep their order.
pub fn next_group<T>(waiting: &mut VecDeque<T>, max: usize, keys: impl Fn(&T) -> Vec<GroupKey>) -> Vec<T> {
    let mut taken_keys = HashSet::new();
    let mut group = Vec::new();
    let mut left = VecDeque::new();
    while let Some(item) = waiting.pop_front() {
        let item_keys = keys(&item);
        if group.len() < max && item_keys.iter().all(|k| !taken_keys.contains(k)) {
            taken_keys.extend(item_keys);
            group.push(item);
        } else {
            // Keys of a deferred append block later ones too: an append to a
            // rollout never overtakes an earlier one to the same rollout.
            taken_keys.extend(item_keys);
            left.push_back(item);
        }
    }
    *waiting = left;
    group
}

/// Appends a group: one transaction, the lines written and synced together,
/// one commit. Answers come in the order of `reqs`. An append whose line could
/// not be written fails alone: the transaction is rolled back and the rest
/// are carried out again without it, so nothing of it is left behind.
pub async fn append_group(store: &dyn Store, volumes: &Volumes, reqs: &[AppendRequest]) -> Vec<Answer> {
    let mut answers: Vec<Option<Answer>> = reqs.iter().map(|_| None).collect();
    // Every process locks rows in one order, so two groups never wait on each other in a cycle.
    let mut pending: Vec<usize> = (0..reqs.len()).collect();
    pending.sort_by(|&a, &b| lock_order(&reqs[a]).cmp(&lock_order(&reqs[b])));
    while !pending.is_empty() {
        match try_group(store, volumes, reqs, &pending).await {
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

/// Writes each line (by its place in the group) into its layout's sessions
/// folder and makes all of them durable together.
fn write_lines(
    lines: Vec<(usize, std::path::PathBuf, ValidLayout, AppendPosition, String)>,
) -> Vec<(usize, Result<u64, IngestError>)> {
    let mut results = Vec::with_capacity(lines.len());
    let mut appends = Vec::with_capacity(lines.len());
    let mut places = Vec::with_capacity(lines.len());
    let mut ensured: Vec<(std::path::PathBuf, String, String)> = Vec::new();
    for (place, root, layout, position, line) in lines {
        let folders = (root, layout.sessions_dir.normalized.clone(), layout.memories_dir.normalized.clone());
        let ready = if ensured.contains(&folders) {
            Ok(())
        } else {
            ensure_layout(&folders.0, &layout).inspect(|()| ensured.push(folders.clone()))
        };
        let root = &folders.0;
        let path = ready.and_then(|()| confine(root, &position.rollout_path));
        match path {
            Ok(path) => {
                appends.push(LineAppend { path, committed_len: position.committed_len, line });
                places.push(place);
            }
            Err(err) => results.push((place, Err(err.into()))),
        }
    }
    let durable = append_all_durably(&appends);
    results.extend(places.into_iter().zip(durable.into_iter().map(|r| r.map_err(IngestError::from))));
    results
}

fn lock_order(req: &AppendRequest) -> (TenantId, &str, &str, &str) {
    (req.tenant_id, req.session_id.as_str(), req.layout_name.as_str(), req.segment.rollout_id.as_str())
}

enum GroupResult {
    /// One outcome per pending append, in their order.
    Committed(Vec<AppendOutcome>),
    Failed(StoreError),
    /// These appends (by request) could not be written; nothing was committed.
    NotWritten(Vec<(usize, IngestError)>),
}

async fn try_group(store: &dyn Store, volumes: &Volumes, reqs: &[AppendRequest], pending: &[usize]) -> GroupResult {
    let group: Vec<&AppendRequest> = pending.iter().map(|&i| &reqs[i]).collect();
    let batch = match store.begin_appends(&group).await {
        Ok(batch) => batch,
        Err(err) => return GroupResult::Failed(err),
    };
    let mut failures = Vec::new();
    let mut lines = Vec::new();
    for (place, start) in batch.starts().iter().enumerate() {
        let AppendStart::Write(position) = start else { continue };
        let req = group[place];
        match volumes.workspace_root(req.tenant_id, &position.workspace) {
            Ok(root) => lines.push((place, root, req.layout.clone(), position.clone(), req.segment.line.clone())),
            Err(err) => failures.push((pending[place], err.into())),
        }
    }
    let written = tokio::task::spawn_blocking(move || write_lines(lines)).await;
    let mut new_lens = vec![0; group.len()];
    match written {
        Ok(written) => {
            for (place, result) in written {
                match result {
                    Ok(new_len) => new_lens[place] = new_len,
                    Err(err) => failures.push((pending[place], err)),
                }
            }
        }
        Err(panicked) => {
            return GroupResult::Failed(StoreError::Corrupt(format!("writing the rollout files panicked: {panicked}")));
        }
    }
    if !failures.is_empty() {
        return GroupResult::NotWritten(failures);
    }
    let mut outcomes = Vec::with_capacity(group.len());
    let mut written = Vec::new();
    for (place, start) in batch.starts().iter().enumerate() {
        match start {
            AppendStart::Done(outcome) => outcomes.push(outcome.clone()),
            AppendStart::Write(position) => {
                let req = group[place];
                let receipt = SegmentReceipt {
                    session_id: req.session_id.clone(),
                    layout: req.layout_name.clone(),
                    rollout_id: req.segment.rollout_id.clone(),
                    segment_index: position.segment_index,
                    rollout_path: position.rollout_path.clone(),
                };
                written.push(WrittenSegment { request: place, new_len: new_lens[place], receipt: receipt.clone() });
                outcomes.push(AppendOutcome::Appended { receipt, opened_session: position.opened_session });
            }
        }
    }
    match batch.commit(&written).await {
        Ok(()) => GroupResult::Committed(outcomes),
        Err(err) => GroupResult::Failed(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(rollout: &str) -> Vec<GroupKey> {
        vec![GroupKey::Rollout(uuid::Uuid::nil(), LayoutName::parse("default").unwrap(), rollout.into())]
    }

    #[test]
    fn a_group_takes_the_oldest_appends_up_to_its_size() {
        let mut waiting: VecDeque<&str> = ["a", "b", "c", "d"].into();
        assert_eq!(next_group(&mut waiting, 3, |r| key(r)), ["a", "b", "c"]);
        assert_eq!(waiting, ["d"]);
    }

    #[test]
    fn appends_to_one_rollout_go_in_later_groups_in_their_order() {
        let mut waiting: VecDeque<(&str, u8)> = [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3)].into();
        assert_eq!(next_group(&mut waiting, 10, |(r, _)| key(r)), [("a", 1), ("b", 1), ("c", 1)]);
        assert_eq!(next_group(&mut waiting, 10, |(r, _)| key(r)), [("a", 2)]);
        assert_eq!(next_group(&mut waiting, 10, |(r, _)| key(r)), [("a", 3)]);
        assert!(waiting.is_empty());
    }

    #[test]
    fn an_append_past_the_size_keeps_later_ones_of_its_rollout_behind_it() {
        let mut waiting: VecDeque<(&str, u8)> = [("a", 1), ("b", 1), ("b", 2)].into();
        assert_eq!(next_group(&mut waiting, 1, |(r, _)| key(r)), [("a", 1)]);
        assert_eq!(waiting, [("b", 1), ("b", 2)]);
    }

    #[test]
    fn one_idempotency_key_never_appears_twice_in_a_group() {
        let tenant = uuid::Uuid::nil();
        let keyed = |k: &str| vec![GroupKey::IdempotencyKey(tenant, k.into())];
        let mut waiting: VecDeque<&str> = ["k1", "k1", "k2"].into();
        assert_eq!(next_group(&mut waiting, 10, |k| keyed(k)), ["k1", "k2"]);
        assert_eq!(waiting, ["k1"]);
    }
}
