//! An append's rollouts: found, made where new and locked, and where each
//! of its lines goes in them (`ingest` places the appends of a group).

use super::ingest::{Known, RolloutPosition};
use super::ingest_record::RolloutUpdate;
use super::*;
use crate::domain::ids::WorkspaceName;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use std::collections::{BTreeMap, HashMap};

impl SqlStore<DB> {
    /// Each rollout of the append (by layout and id) with its first segment's
    /// place in the append and its position, locked: those the group's
    /// statement found, the rest made where new (`true` when one was) and
    /// locked in one order — one by one for a single segment, two statements
    /// for a batch's.
    pub(super) async fn lock_rollouts_in(
        tx: &mut WriteTx<'_, DB>,
        req: &AppendRequest,
        workspace: &WorkspaceName,
        known: &Known,
        now: DateTime<Utc>,
    ) -> StoreResult<(BTreeMap<(String, String), (usize, RolloutPosition)>, bool)> {
        let mut firsts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for (index, s) in req.segments.iter().enumerate() {
            firsts
                .entry((s.layout_name.as_str().to_owned(), s.segment.rollout_id.as_str().to_owned()))
                .or_insert(index);
        }
        let mut positions = BTreeMap::new();
        let mut unknown = Vec::new();
        for ((layout, rollout), first) in firsts {
            let key = (req.tenant_id, workspace.as_str().to_owned(), layout, rollout);
            match known.rollouts.get(&key) {
                Some(position) => {
                    positions.insert((key.2, key.3), (first, *position));
                }
                None => unknown.push((first, (key.2, key.3))),
            }
        }
        let made = match unknown.as_slice() {
            [] => false,
            [(first, rollout)] => {
                let s = &req.segments[*first];
                let path = s.layout.rollout_path(&s.segment.rollout_id);
                let (position, made) = Self::lock_rollout_in(tx, req.tenant_id, workspace, s, &path, now).await?;
                positions.insert(rollout.clone(), (*first, position));
                made
            }
            _ => {
                let (found, made) = Self::make_rollouts_in(tx, req, workspace, &unknown, now).await?;
                for (first, rollout) in unknown {
                    let position = found.get(&rollout).copied().ok_or_else(|| corrupt("a made rollout is missing"))?;
                    positions.insert(rollout, (first, position));
                }
                made
            }
        };
        Ok((positions, made))
    }

    /// A batch's rollouts that the group's statement did not find (by their
    /// first segment), made where new in one statement and all locked by a
    /// second, in one order; their positions, and whether one was made.
    async fn make_rollouts_in(
        tx: &mut WriteTx<'_, DB>,
        req: &AppendRequest,
        workspace: &WorkspaceName,
        rollouts: &[(usize, (String, String))],
        now: DateTime<Utc>,
    ) -> StoreResult<(HashMap<(String, String), RolloutPosition>, bool)> {
        let mut insert = sqlx::QueryBuilder::<DB>::new(
            "INSERT INTO rollouts (tenant_id, workspace, layout, rollout_id, rollout_path, committed_len,
                                   segment_count, updated_at) ",
        );
        insert.push_values(rollouts, |mut v, (first, _)| {
            let s = &req.segments[*first];
            v.push_bind(req.tenant_id)
                .push_bind(workspace.as_str())
                .push_bind(s.layout_name.as_str())
                .push_bind(s.segment.rollout_id.as_str())
                .push_bind(s.layout.rollout_path(&s.segment.rollout_id))
                .push_unseparated(", 0, 0, ")
                .push_bind_unseparated(now);
        });
        insert.push(" ON CONFLICT DO NOTHING");
        let made = insert.build().execute(&mut **tx).await?.rows_affected() > 0;
        let mut lock = sqlx::QueryBuilder::<DB>::new(
            "SELECT locked.layout, locked.rollout_id, locked.committed_len, locked.segment_count, locked.forgetting
             FROM rollouts locked JOIN (",
        );
        lock.push_values(rollouts, |mut v, (_, (layout, rollout))| {
            v.push_bind(req.tenant_id)
                .push_bind(workspace.as_str())
                .push_bind(layout.as_str())
                .push_bind(rollout.as_str());
        });
        lock.push(
            ") AS v ON locked.tenant_id = v.column1 AND locked.workspace = v.column2
                 AND locked.layout = v.column3 AND locked.rollout_id = v.column4
             ORDER BY locked.tenant_id, locked.workspace, locked.layout, locked.rollout_id",
        );
        lock.push(DB::LOCK_JOINED_ROWS);
        let mut found = HashMap::new();
        for row in lock.build().fetch_all(&mut **tx).await? {
            let position = (row.try_get("committed_len")?, row.try_get("segment_count")?, row.try_get("forgetting")?);
            found.insert((row.try_get("layout")?, row.try_get("rollout_id")?), position);
        }
        Ok((found, made))
    }

    /// The first segment of a batch whose rollout, not among those the
    /// group's statement locked, is being forgotten: asked before the batch
    /// makes anything, so that its refusal has nothing to undo (one made
    /// meanwhile is still caught, and undone, when its row is locked).
    pub(super) async fn forgotten_first_in(
        tx: &mut WriteTx<'_, DB>,
        req: &AppendRequest,
        workspace: &WorkspaceName,
        known: &Known,
    ) -> StoreResult<Option<usize>> {
        let mut firsts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut forgotten = None;
        for (index, s) in req.segments.iter().enumerate() {
            let (layout, rollout) = (s.layout_name.as_str(), s.segment.rollout_id.as_str());
            let key = (req.tenant_id, workspace.as_str().to_owned(), layout.to_owned(), rollout.to_owned());
            match known.rollouts.get(&key) {
                Some((_, _, true)) => forgotten = forgotten.or(Some(index)),
                Some(_) => {}
                None => {
                    firsts.entry((layout, rollout)).or_insert(index);
                }
            }
        }
        if firsts.is_empty() {
            return Ok(forgotten);
        }
        let mut query = sqlx::QueryBuilder::<DB>::new("SELECT r.layout, r.rollout_id FROM rollouts r JOIN (");
        query.push_values(&firsts, |mut v, ((layout, rollout), _)| {
            v.push_bind(req.tenant_id).push_bind(workspace.as_str()).push_bind(*layout).push_bind(*rollout);
        });
        query.push(
            ") AS v ON r.tenant_id = v.column1 AND r.workspace = v.column2 AND r.layout = v.column3
                 AND r.rollout_id = v.column4
             WHERE r.forgetting",
        );
        for row in query.build().fetch_all(&mut **tx).await? {
            let (layout, rollout): (String, String) = (row.try_get("layout")?, row.try_get("rollout_id")?);
            if let Some(&index) = firsts.get(&(layout.as_str(), rollout.as_str())) {
                forgotten = Some(forgotten.map_or(index, |f: usize| f.min(index)));
            }
        }
        Ok(forgotten)
    }

    /// The rollout's committed length and segment count, its row created
    /// (`true`) if it is new, and locked.
    async fn lock_rollout_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        segment: &SegmentAppend,
        path_text: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<(RolloutPosition, bool)> {
        let (layout, rollout) = (segment.layout_name.as_str(), segment.segment.rollout_id.as_str());
        let lock = || {
            sqlx::query(locking::<DB>(
                "SELECT committed_len, segment_count, forgetting FROM rollouts
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ))
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(layout)
            .bind(rollout)
        };
        let (row, made) = match lock().fetch_optional(&mut *conn).await? {
            Some(row) => (row, false),
            None => {
                let made = sqlx::query(
                    "INSERT INTO rollouts (tenant_id, workspace, layout, rollout_id, rollout_path, committed_len,
                                           segment_count, updated_at)
                     VALUES ($1, $2, $3, $4, $5, 0, 0, $6) ON CONFLICT DO NOTHING",
                )
                .bind(tenant)
                .bind(workspace.as_str())
                .bind(layout)
                .bind(rollout)
                .bind(path_text)
                .bind(now)
                .execute(&mut *conn)
                .await?
                .rows_affected()
                    > 0;
                (lock().fetch_one(&mut *conn).await?, made)
            }
        };
        let position = (row.try_get("committed_len")?, row.try_get("segment_count")?, row.try_get("forgetting")?);
        Ok((position, made))
    }
}

/// The refusal of an append whose segment at `index` goes to a rollout being forgotten.
pub(super) fn rollout_forgotten(req: &AppendRequest, index: usize) -> AppendOutcome {
    let rollout = &req.segments[index].segment.rollout_id;
    let detail = format!("Rollout {rollout} is being forgotten; it takes segments again once that is done.");
    AppendOutcome::Forgetting { detail, index }
}

/// Each segment's place (after the lines before it in its rollout file),
/// and what each rollout grows by, in the order of their first segments.
pub(super) fn place_lines(
    req: &AppendRequest,
    workspace: &WorkspaceName,
    positions: BTreeMap<(String, String), (usize, RolloutPosition)>,
) -> (Vec<SegmentPlace>, Vec<RolloutUpdate>) {
    let mut growth: BTreeMap<(String, String), RolloutUpdate> = BTreeMap::new();
    let mut places = Vec::with_capacity(req.segments.len());
    for s in &req.segments {
        let key = (s.layout_name.as_str().to_owned(), s.segment.rollout_id.as_str().to_owned());
        let (first, (committed_len, segment_count, _)) = positions[&key];
        let update = growth.entry(key).or_insert_with(|| RolloutUpdate {
            first,
            layout: s.layout_name.as_str().to_owned(),
            rollout_id: s.segment.rollout_id.as_str().to_owned(),
            new_len: committed_len,
            segments: 0,
            updated_at: String::new(),
            terminal_state: String::new(),
        });
        let receipt = SegmentReceipt {
            workspace: workspace.clone(),
            session_id: req.session_id.clone(),
            layout: s.layout_name.clone(),
            rollout_id: s.segment.rollout_id.clone(),
            segment_index: segment_count + update.segments,
            rollout_path: s.layout.rollout_path(&s.segment.rollout_id),
        };
        places.push(SegmentPlace { offset: update.new_len as u64, receipt });
        update.new_len += s.segment.line.len() as i64;
        update.segments += 1;
        update.updated_at.clone_from(&s.segment.updated_at);
        update.terminal_state.clone_from(&s.segment.terminal_state);
    }
    let mut rollouts: Vec<RolloutUpdate> = growth.into_values().collect();
    rollouts.sort_by_key(|r| r.first);
    (places, rollouts)
}
