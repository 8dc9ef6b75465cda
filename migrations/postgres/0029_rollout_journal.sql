-- Where workspace files live in an object store (SPEC §6.1), a rollout's
-- object cannot be appended to: an acknowledged segment is kept here, in the
-- transaction that acknowledges it, until the object is rewritten with it.
-- A rollout is then its object's first `object_len` bytes followed by its
-- journal's lines in `start_len` order (each starting where the one before
-- ends); `object_etag` is the object's version those bytes were read from.
ALTER TABLE rollouts ADD COLUMN object_len BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollouts ADD COLUMN object_etag TEXT;

CREATE TABLE rollout_journal (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    start_len BIGINT NOT NULL,
    lines BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout, rollout_id, start_len)
);
-- Every line is inserted and then deleted when its rollout's object is rewritten.
ALTER TABLE rollout_journal SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
