-- The publish a job's fenced finish committed: a manifest on disk with this
-- id is completed after a crash, any other one is undone.
ALTER TABLE jobs ADD COLUMN publish_id UUID;
