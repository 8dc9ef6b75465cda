-- Where workspace files live in an object store (SPEC §6.1), memoryd's own
-- readers see the memory files this table makes current: a file's content is
-- the object `.memoryd/versions/<publish_id>/<path>` under its workspace's
-- prefix, written before the job's fenced finish recorded it here.
CREATE TABLE workspace_files (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    path TEXT NOT NULL,
    publish_id UUID NOT NULL,
    bytes BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (tenant_id, workspace, path)
);

-- The last finish that changed a workspace's files: a replica's cached copy
-- is current while it was made from this publish (never reused, unlike a
-- counter a forget would start again).
CREATE TABLE workspace_generations (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    publish_id UUID NOT NULL,
    PRIMARY KEY (tenant_id, workspace)
);

-- What a finish leaves to do in the bucket, recorded in its transaction so
-- that no crash loses it: 'place' makes the plain key of `path` what the
-- workspace's current row says (copied there, or removed); 'remove' deletes
-- the replaced version `publish_id` of `path`.
CREATE TABLE workspace_file_chores (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    path TEXT NOT NULL,
    publish_id UUID NOT NULL,
    chore TEXT NOT NULL,
    since TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, workspace, path, publish_id, chore)
);
