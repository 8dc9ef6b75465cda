-- The raw-memory index: one row per rollout whose phase one wrote a memory.
CREATE TABLE raw_memories (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    rollout_path TEXT NOT NULL,
    rollout_summary_file TEXT NOT NULL,
    terminal_state TEXT NOT NULL,
    extracted_len INTEGER NOT NULL,
    job_id BLOB NOT NULL,
    written_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout, rollout_id)
);

-- At most one phase two runs per (tenant, workspace, layout), whatever the replicas do.
CREATE UNIQUE INDEX jobs_one_running_phase_two ON jobs (tenant_id, workspace, layout)
    WHERE kind = 'phase_two' AND state = 'running';

-- A phase-one attempt that overflowed the model's context retries with a smaller budget.
ALTER TABLE jobs ADD COLUMN token_limit INTEGER;
