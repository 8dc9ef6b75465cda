-- Closes of one layout share its waiting phase-two job (SPEC §2.3): the
-- sessions each phase-two job serves.
CREATE TABLE job_sessions (
    job_id BLOB NOT NULL REFERENCES jobs(id),
    tenant_id BLOB NOT NULL,
    session_id TEXT NOT NULL,
    PRIMARY KEY (job_id, session_id)
);
CREATE INDEX job_sessions_by_session ON job_sessions (tenant_id, session_id);
INSERT INTO job_sessions (job_id, tenant_id, session_id) SELECT id, tenant_id, session_id FROM jobs WHERE kind = 'phase_two';
-- The sessions a run served, as a JSON list.
ALTER TABLE phase_two_runs ADD COLUMN sessions TEXT;
