-- A tenant's limits (SPEC §2.9), as set by an operator; fields it does not
-- set come from MEMORYD_DEFAULT_LIMITS.
CREATE TABLE tenant_limits (
    tenant_id UUID PRIMARY KEY REFERENCES tenants(id),
    limits TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
