-- The last successful phase-two selection of each (tenant, workspace, layout).
CREATE TABLE phase_two_selections (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    run_id BLOB NOT NULL,
    document TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout)
);

-- Every phase-two attempt, for dashboards.
CREATE TABLE phase_two_runs (
    id BLOB PRIMARY KEY,
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    job_id BLOB NOT NULL,
    session_id TEXT NOT NULL,
    state TEXT NOT NULL,
    selected INTEGER NOT NULL,
    added INTEGER NOT NULL,
    retained INTEGER NOT NULL,
    removed INTEGER NOT NULL,
    files_changed TEXT NOT NULL,
    usage TEXT NOT NULL,
    turns INTEGER NOT NULL,
    error TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL
);

CREATE INDEX phase_two_runs_by_layout ON phase_two_runs (tenant_id, workspace, layout, finished_at);
