-- Phase two asks the database for the newest raw memories only: `updated_at`
-- as fixed-width UTC text ('' when unknown), filled in by memoryd.
ALTER TABLE raw_memories ADD COLUMN updated_at_utc TEXT;
CREATE INDEX raw_memories_newest ON raw_memories (tenant_id, workspace, layout, updated_at_utc, rollout_id);

-- The claim query counts each tenant's running jobs.
CREATE INDEX jobs_by_tenant_state ON jobs (tenant_id, state);
