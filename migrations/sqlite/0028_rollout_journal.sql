-- Where workspace files live in an object store (SPEC §6.1), a rollout's
-- object cannot be appended to: an acknowledged segment is kept here, in the
-- transaction that acknowledges it, until the object is rewritten with it.
-- A rollout is then its object's first `object_len` bytes followed by its
-- journal's lines in `start_len` order (each starting where the one before
-- ends); `object_etag` is the object's version those bytes were read from.
ALTER TABLE rollouts ADD COLUMN object_len INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rollouts ADD COLUMN object_etag TEXT;

CREATE TABLE rollout_journal (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    start_len INTEGER NOT NULL,
    lines BLOB NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout, rollout_id, start_len)
);
