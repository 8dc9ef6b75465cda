-- Every claim first puts back the running jobs whose lease has expired. It
-- found them on `jobs_due` (state first), past every entry of a running job
-- that had since finished and not yet been vacuumed: about a millisecond a
-- claim during a drain. The running jobs get an index of their own, by when
-- their lease expires.
CREATE INDEX jobs_running_leases ON jobs (lease_expires_at) WHERE state = 'running';
