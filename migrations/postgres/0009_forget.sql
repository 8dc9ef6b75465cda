-- Forgetting (SPEC §2.7): a job kind of its own, what it forgets, and the
-- marks that refuse new data while it runs.
ALTER TABLE jobs ADD COLUMN forget_scope TEXT;
ALTER TABLE jobs ADD COLUMN forget_mode TEXT;
-- The rollout ids a forget of conversations removes, as a JSON list.
ALTER TABLE jobs ADD COLUMN forget_rollouts TEXT;
DROP INDEX jobs_one_running_phase_two;
CREATE UNIQUE INDEX jobs_one_running_phase_two ON jobs (tenant_id, workspace, layout)
    WHERE kind IN ('phase_two', 'restore', 'forget') AND state = 'running';
-- Retention deletes finished jobs and closed sessions by age.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX sessions_closed ON sessions (closed_at) WHERE closed_at IS NOT NULL;

-- A rollout queued for forgetting takes no more segments.
ALTER TABLE rollouts ADD COLUMN forgetting BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX rollouts_idle ON rollouts (updated_at);

-- What an idempotency key's append wrote to, so a forget finds its keys;
-- and their age, for the retention sweep.
ALTER TABLE idempotency_keys ADD COLUMN workspace TEXT;
ALTER TABLE idempotency_keys ADD COLUMN layout TEXT;
ALTER TABLE idempotency_keys ADD COLUMN rollout_id TEXT;
UPDATE idempotency_keys k SET layout = r.layout, rollout_id = r.rollout_id, workspace = s.workspace
FROM (SELECT tenant_id, key, response::json->>'layout' AS layout, response::json->>'rollout_id' AS rollout_id,
             response::json->>'session_id' AS session_id
      FROM idempotency_keys WHERE response IS NOT NULL) r
JOIN sessions s ON s.session_id = r.session_id
WHERE k.tenant_id = r.tenant_id AND k.key = r.key AND s.tenant_id = r.tenant_id;
CREATE INDEX idempotency_keys_by_rollout ON idempotency_keys (tenant_id, workspace, layout, rollout_id);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

-- Workspaces being forgotten: new sessions there are refused until it is done.
CREATE TABLE workspace_forgets (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    job_id UUID NOT NULL,
    PRIMARY KEY (tenant_id, workspace)
);

-- A tenant being forgotten: its keys are revoked, its rows wait for the job.
ALTER TABLE tenants ADD COLUMN deleting_at TIMESTAMPTZ;

-- The kind of run a record is of (phase two, restore, forget).
ALTER TABLE phase_two_runs ADD COLUMN kind TEXT;
UPDATE phase_two_runs SET kind = CASE WHEN restored_from IS NULL THEN 'phase_two' ELSE 'restore' END;
-- A forget's run keeps the files as it left them, never what they were before.
ALTER TABLE run_history ADD COLUMN before_omitted BOOLEAN NOT NULL DEFAULT FALSE;

-- What a run added, kept and removed (rollout ids), for its page; a forget's
-- omits the forgotten ones.
ALTER TABLE phase_two_runs ADD COLUMN ledger TEXT;

-- Console sessions ended by signing out: refused on every replica until
-- they would have expired anyway.
CREATE TABLE console_signouts (
    session_id TEXT PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);

-- Redactions (SPEC §4) by rule, of a job and of a run, as JSON objects.
ALTER TABLE jobs ADD COLUMN redactions TEXT;
ALTER TABLE phase_two_runs ADD COLUMN redactions TEXT;
