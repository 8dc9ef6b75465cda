-- The last successful phase-two selection of each (tenant, workspace, layout).
CREATE TABLE phase_two_selections (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    run_id UUID NOT NULL,
    document TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout)
);

-- Every phase-two attempt, for dashboards.
CREATE TABLE phase_two_runs (
    id UUID PRIMARY KEY,
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    job_id UUID NOT NULL,
    session_id TEXT NOT NULL,
    state TEXT NOT NULL,
    selected BIGINT NOT NULL,
    added BIGINT NOT NULL,
    retained BIGINT NOT NULL,
    removed BIGINT NOT NULL,
    files_changed TEXT NOT NULL,
    usage TEXT NOT NULL,
    turns BIGINT NOT NULL,
    error TEXT,
    started_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL
);

CREATE INDEX phase_two_runs_by_layout ON phase_two_runs (tenant_id, workspace, layout, finished_at);
