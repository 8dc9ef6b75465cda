-- A tenant's limits (SPEC §2.9), as set by an operator; fields it does not
-- set come from MEMORYD_DEFAULT_LIMITS.
CREATE TABLE tenant_limits (
    tenant_id UUID PRIMARY KEY REFERENCES tenants(id),
    limits TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

-- Open sessions are counted against a tenant's open_sessions limit.
CREATE INDEX sessions_by_state ON sessions (tenant_id, state);
