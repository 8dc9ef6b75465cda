-- Who made each key (SPEC §2.11): revoking a key revokes the keys it made,
-- and theirs. A tenant's first key, the admin's and keys made before have none.
ALTER TABLE api_keys ADD COLUMN created_by BLOB;
CREATE INDEX api_keys_created_by ON api_keys (created_by) WHERE created_by IS NOT NULL;
