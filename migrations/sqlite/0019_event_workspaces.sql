-- The workspace an event reports on (from its data), so that a forget of
-- a workspace or of its conversations takes their events out of the outbox
-- with everything else (SPEC §2.8); NULL for a tenant's own (a webhook test).
ALTER TABLE events ADD COLUMN workspace TEXT;
UPDATE events SET workspace = json_extract(payload, '$.data.workspace');
CREATE INDEX events_by_workspace ON events (tenant_id, workspace);
