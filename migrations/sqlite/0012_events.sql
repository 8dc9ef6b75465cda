-- The outbox (SPEC §2.8): each event is written by the transaction whose
-- change it reports. `seq` counts a tenant's events from 1 with no gap, in
-- the order their transactions committed: `event_counters` hands the
-- numbers out, and its row stays locked until that commit.
CREATE TABLE event_counters (
    tenant_id BLOB PRIMARY KEY REFERENCES tenants(id),
    last_seq INTEGER NOT NULL
);

CREATE TABLE events (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    seq INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    -- The body sent: {"type", "timestamp", "data"}.
    payload TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX events_created ON events (created_at);

-- A tenant's webhook endpoints. `secret` and `previous_secret` are sealed
-- (ChaCha20-Poly1305 under the server's secrets key), never stored in clear.
CREATE TABLE webhooks (
    id BLOB PRIMARY KEY,
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    url TEXT NOT NULL,
    -- The event types it receives, comma-separated between commas; '*' all.
    events TEXT NOT NULL,
    description TEXT,
    secret TEXT NOT NULL,
    previous_secret TEXT,
    previous_until TEXT,
    state TEXT NOT NULL,
    disabled_reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at);

-- One event to one endpoint: `pending` until a 2xx (`succeeded`), out of
-- attempts (`failed`) or the endpoint disabled or deleted (`dropped`).
CREATE TABLE webhook_deliveries (
    tenant_id BLOB NOT NULL REFERENCES tenants(id),
    webhook_id BLOB NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_seq INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    lease_token BLOB,
    lease_expires_at TEXT,
    last_status INTEGER,
    last_error TEXT,
    last_response TEXT,
    last_attempt_at TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (webhook_id, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (tenant_id, event_seq);
