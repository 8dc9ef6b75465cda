-- A failing endpoint is paused, not hammered (SPEC §2.8): after a failed
-- attempt nothing more is sent to it until that attempt's retry
-- (`paused_until`). An endpoint's deliveries are claimed together, under the
-- endpoint's lease, so that a claim reads the few endpoints due and the
-- first deliveries of each (in order), never an endpoint's whole backlog.
ALTER TABLE webhooks ADD COLUMN paused_until TEXT;
ALTER TABLE webhooks ADD COLUMN lease_token BLOB;
ALTER TABLE webhooks ADD COLUMN lease_expires_at TEXT;
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, event_seq) WHERE state = 'pending';
