-- The bytes each tenant keeps (SPEC §2.9), kept up to date by the
-- transactions that change them: under `scope` = a workspace's name, the
-- files of that workspace (rollouts, memory files); under scope '', the
-- tenant's memory history (kept in this database).
CREATE TABLE storage_usage (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    scope TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, scope)
);

-- What existed before: the committed rollouts and the history; memory files
-- are added by the first reconciling walk of the volume.
INSERT INTO storage_usage (tenant_id, scope, bytes)
SELECT tenant_id, workspace, CAST(SUM(committed_len) AS INTEGER) FROM rollouts GROUP BY tenant_id, workspace;
INSERT INTO storage_usage (tenant_id, scope, bytes)
SELECT tenant_id, '', CAST(SUM(length(content)) AS INTEGER) FROM history_blobs GROUP BY tenant_id;

-- A tenant's counters of one UTC day (`day` is YYYY-MM-DD); `storage_bytes`
-- is its storage as the day's last change left it.
CREATE TABLE usage_days (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    day TEXT NOT NULL,
    segments INTEGER NOT NULL DEFAULT 0,
    bytes_ingested INTEGER NOT NULL DEFAULT 0,
    closes INTEGER NOT NULL DEFAULT 0,
    runs INTEGER NOT NULL DEFAULT 0,
    storage_bytes INTEGER,
    PRIMARY KEY (tenant_id, day)
);

-- A tenant's model calls and tokens of one UTC day, by job kind.
CREATE TABLE model_usage_days (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    day TEXT NOT NULL,
    kind TEXT NOT NULL,
    model_calls INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, kind)
);

-- A tenant whose model tokens of the day reached its model_tokens_per_day:
-- its phase-one and phase-two jobs are not claimed before `until` (the next
-- UTC midnight).
CREATE TABLE model_budget_holds (
    tenant_id BLOB PRIMARY KEY REFERENCES tenants(id),
    until TEXT NOT NULL
);
