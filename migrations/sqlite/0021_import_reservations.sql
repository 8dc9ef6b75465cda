-- An import's claim on the tenant's storage limit while its job is queued
-- or running (SPEC §2.7): the uploaded archive's size, then, once the job
-- has read the archive, the bytes it will place. Counted with what the
-- tenant keeps, so that uploads and imports side by side cannot together
-- pass the limit.
ALTER TABLE jobs ADD COLUMN archive_bytes BIGINT;
