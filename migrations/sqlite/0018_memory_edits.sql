-- The running agent's memory (SPEC §2.10): edits run as jobs of their own
-- kind in the layout's one-at-a-time lane, and usage ranks the selection.

-- An edit job's request (its operations or patch, preconditions and who
-- asked), as JSON; emptied once the edit is published.
ALTER TABLE jobs ADD COLUMN edit_spec TEXT;
-- An edit's run names the session and the conversation it came from, and why.
ALTER TABLE phase_two_runs ADD COLUMN rollout_id TEXT;
ALTER TABLE phase_two_runs ADD COLUMN reason TEXT;

DROP INDEX jobs_one_running_phase_two;
CREATE UNIQUE INDEX jobs_one_running_phase_two ON jobs (tenant_id, workspace, layout)
    WHERE kind IN ('phase_two', 'restore', 'forget', 'edit') AND state = 'running';
-- A layout's queued edits go before its next phase two, restore or forget:
-- a claim asks whether any waits, by layout.
CREATE INDEX jobs_queued_edits ON jobs (tenant_id, workspace, layout) WHERE kind = 'edit' AND state = 'queued';

-- Which raw memories the running agents used (a read naming a session, a
-- citation in a segment): one row per (session, rollout), so each pair counts once.
CREATE TABLE memory_uses (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    used_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout, rollout_id, session_id)
);
