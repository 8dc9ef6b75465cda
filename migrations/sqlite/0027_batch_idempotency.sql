-- A batch's idempotency key (SPEC §2.2 "Batches") keeps an answer naming
-- every rollout the batch appended to, where a single append's key names
-- one (its own columns). Each is listed here, so that forgetting any of
-- them takes the key and its answer too.
CREATE TABLE idempotency_key_rollouts (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    key TEXT NOT NULL,
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, key, layout, rollout_id)
);
CREATE INDEX idempotency_key_rollouts_by_rollout ON idempotency_key_rollouts (tenant_id, workspace, layout, rollout_id);
CREATE INDEX idempotency_key_rollouts_by_age ON idempotency_key_rollouts (created_at);
