-- When each tenant last had a job claimed. Among tenants with as many jobs
-- running, the one served longest ago goes first (a tenant never served
-- before all others): without it ties went to the older job, and a tenant
-- that closed a session during a backlog of many tenants waited for every
-- other tenant's whole queue.
CREATE TABLE tenant_turns (
    tenant_id UUID PRIMARY KEY REFERENCES tenants(id),
    last_claimed_at TIMESTAMPTZ NOT NULL
);
