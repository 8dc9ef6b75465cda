-- Workspaces an import made (SPEC §2.7): one of memory files alone has no
-- session, rollout or raw memory, yet holds files; it is known (listed,
-- exported, forgotten) from its import on, until it is forgotten.
CREATE TABLE workspaces (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, workspace)
);
