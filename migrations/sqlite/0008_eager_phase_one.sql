-- Phase one made early, for a rollout idle in an open session (MEMORYD_EAGER_PHASE_ONE_SECS).
ALTER TABLE jobs ADD COLUMN eager INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_by_rollout ON jobs (tenant_id, workspace, layout, rollout_id);
