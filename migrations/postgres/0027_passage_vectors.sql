-- Search by meaning (SPEC §2.10): each passage's embedding, by the file it
-- stands in and its digest (the SHA-256 of the text embedded), so that an
-- unchanged passage is never embedded twice. Vectors are derived memory: a
-- publish drops the vectors of the passages its files no longer hold, a
-- forget of a workspace or tenant drops them all.
CREATE TABLE passage_vectors (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    path TEXT NOT NULL,
    digest TEXT NOT NULL,
    model TEXT NOT NULL,
    -- Little-endian f32s of unit length.
    vector BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout, path, digest)
);
CREATE INDEX passage_vectors_by_digest ON passage_vectors (tenant_id, digest);

-- Each layout's indexing: every publish raises `generation`; the indexer
-- stores the vectors of what it read at a generation only while that is
-- still the latest, and then marks it `embedded_generation`. A failed
-- embedding call is retried at `retry_after`.
CREATE TABLE passage_indexes (
    tenant_id UUID NOT NULL REFERENCES tenants(id),
    workspace TEXT NOT NULL,
    layout TEXT NOT NULL,
    -- Set when the row is made: a layout forgotten and published again
    -- starts a new epoch, so an indexing of the old one can store nothing.
    epoch TEXT NOT NULL,
    generation BIGINT NOT NULL,
    embedded_generation BIGINT NOT NULL DEFAULT 0,
    attempts BIGINT NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, workspace, layout)
);
CREATE INDEX passage_indexes_due ON passage_indexes (retry_after) WHERE embedded_generation < generation;

-- Embedding tokens are counted in model_usage_days under the kind 'embedding'.
