-- A job's payload in one column (docs/architecture.md): `spec` holds the
-- externally tagged JSON of the job's JobSpec, filled here from the columns
-- each kind used to have, which then go. `archive_bytes` (an import's live
-- storage reservation) and `eager` (a scheduling flag the queries read) stay.
ALTER TABLE jobs ADD COLUMN spec TEXT;
UPDATE jobs SET spec = CASE kind
    WHEN 'restore' THEN json_build_object('restore', json_build_object('run_id', restore_run_id))::text
    WHEN 'forget' THEN json_build_object('forget', json_build_object(
        'scope', forget_scope,
        'mode', COALESCE(forget_mode, 'scrub'),
        'rollout_ids', COALESCE(forget_rollouts, '[]')::json))::text
    WHEN 'edit' THEN json_build_object('edit', edit_spec::json)::text
    ELSE to_json(kind)::text
END;
ALTER TABLE jobs ALTER COLUMN spec SET NOT NULL;
ALTER TABLE jobs DROP COLUMN restore_run_id,
    DROP COLUMN forget_scope,
    DROP COLUMN forget_mode,
    DROP COLUMN forget_rollouts,
    DROP COLUMN edit_spec;
