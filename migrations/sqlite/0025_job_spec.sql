-- A job's payload in one column (docs/architecture.md): `spec` holds the
-- externally tagged JSON of the job's JobSpec, filled here from the columns
-- each kind used to have, which then go. `archive_bytes` (an import's live
-- storage reservation) and `eager` (a scheduling flag the queries read) stay.
-- SQLite keeps UUIDs as 16-byte blobs: a restore's run is spelt out hyphenated.
ALTER TABLE jobs ADD COLUMN spec TEXT NOT NULL DEFAULT '';
UPDATE jobs SET spec = CASE kind
    WHEN 'restore' THEN json_object('restore', json_object('run_id', lower(
        substr(hex(restore_run_id), 1, 8) || '-' || substr(hex(restore_run_id), 9, 4) || '-' ||
        substr(hex(restore_run_id), 13, 4) || '-' || substr(hex(restore_run_id), 17, 4) || '-' ||
        substr(hex(restore_run_id), 21, 12))))
    WHEN 'forget' THEN json_object('forget', json_object(
        'scope', forget_scope,
        'mode', COALESCE(forget_mode, 'scrub'),
        'rollout_ids', json(COALESCE(forget_rollouts, '[]'))))
    WHEN 'edit' THEN json_object('edit', json(edit_spec))
    ELSE json_quote(kind)
END;
ALTER TABLE jobs DROP COLUMN restore_run_id;
ALTER TABLE jobs DROP COLUMN forget_scope;
ALTER TABLE jobs DROP COLUMN forget_mode;
ALTER TABLE jobs DROP COLUMN forget_rollouts;
ALTER TABLE jobs DROP COLUMN edit_spec;
