-- Scoped keys: what each key reaches. Keys made before reach every
-- workspace with every permission, as they always did.
ALTER TABLE api_keys ADD COLUMN name TEXT;
ALTER TABLE api_keys ADD COLUMN workspaces TEXT NOT NULL DEFAULT '*';
ALTER TABLE api_keys ADD COLUMN permissions TEXT NOT NULL DEFAULT 'ingest,close,read,edit,manage';
ALTER TABLE api_keys ADD COLUMN expires_at TEXT;
