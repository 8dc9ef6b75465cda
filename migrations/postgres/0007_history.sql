-- Listings page newest first by (time, key) (SPEC §2.6).
CREATE INDEX sessions_by_created ON sessions (tenant_id, created_at, session_id);

-- Memory history: what each successful run changed, content-addressed.
CREATE TABLE history_blobs (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    hash TEXT NOT NULL,
    content BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, hash)
);

-- The runs whose history is kept (the newest MEMORYD_HISTORY_RUNS of each layout).
CREATE TABLE run_history (
    run_id UUID PRIMARY KEY,
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX run_history_by_layout ON run_history (tenant_id, workspace, layout, finished_at);

-- One row per file a kept run changed; a NULL hash: the file did not exist.
CREATE TABLE run_files (
    run_id UUID NOT NULL REFERENCES run_history(run_id) ON DELETE CASCADE,
    tenant_id UUID NOT NULL,
    path TEXT NOT NULL,
    before_hash TEXT,
    after_hash TEXT,
    before_bytes BIGINT,
    after_bytes BIGINT,
    PRIMARY KEY (run_id, path)
);
CREATE INDEX run_files_by_tenant ON run_files (tenant_id);

-- A restore (POST …/runs/{run_id}/restore) is a job of its own kind that,
-- like phase two, runs alone per layout.
ALTER TABLE jobs ADD COLUMN restore_run_id UUID;
ALTER TABLE phase_two_runs ADD COLUMN restored_from UUID;
DROP INDEX jobs_one_running_phase_two;
CREATE UNIQUE INDEX jobs_one_running_phase_two ON jobs (tenant_id, workspace, layout)
    WHERE kind IN ('phase_two', 'restore') AND state = 'running';
