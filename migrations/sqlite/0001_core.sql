-- The Postgres schema in SQLite types: UUIDs as 16-byte blobs, timestamps as RFC 3339 text.
CREATE TABLE tenants (
    id BLOB PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE api_keys (
    id BLOB PRIMARY KEY,
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    key_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);

CREATE TABLE layouts (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    name TEXT NOT NULL,
    config TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE sessions (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    session_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    state TEXT NOT NULL,
    metadata TEXT NOT NULL,
    memory_status TEXT,
    created_at TEXT NOT NULL,
    closed_at TEXT,
    PRIMARY KEY (tenant_id, session_id)
);

-- One row per rollout file; committed_len is the acknowledged prefix of the file.
CREATE TABLE rollouts (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    rollout_path TEXT NOT NULL,
    committed_len INTEGER NOT NULL,
    segment_count INTEGER NOT NULL,
    last_updated_at TEXT,
    last_terminal_state TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout, rollout_id)
);

CREATE TABLE session_rollouts (
    tenant_id BLOB NOT NULL,
    session_id TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    segment_count INTEGER NOT NULL,
    first_seen_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, session_id, layout, rollout_id)
);

CREATE TABLE jobs (
    id BLOB PRIMARY KEY,
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    kind TEXT NOT NULL,
    session_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT,
    layout_config TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    run_after TEXT NOT NULL,
    lease_owner TEXT,
    lease_token BLOB,
    lease_expires_at TEXT,
    last_error TEXT,
    usage TEXT,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT
);

CREATE INDEX jobs_due ON jobs (state, run_after);
CREATE INDEX jobs_by_tenant ON jobs (tenant_id, created_at);
CREATE INDEX jobs_by_session ON jobs (tenant_id, session_id);

CREATE TABLE idempotency_keys (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    response TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, key)
);
