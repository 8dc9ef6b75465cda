-- The partial index on (kind, state) of 0014 looked, to Postgres's planner,
-- like the cheapest way to ask whether a session still has a phase one in
-- flight (a claim asks it of every tenant's queued phase two): it read every
-- unfinished phase one of every tenant for each question, and a drain of
-- 300 tenants slowed from about 200 to 90 jobs a second. The question gets
-- an index of its own, keyed the way it is asked; the job gauges count the
-- unfinished jobs on `jobs_due` (state first), as before 0014.
DROP INDEX jobs_unfinished;
CREATE INDEX jobs_phase_one_in_flight ON jobs (tenant_id, session_id, layout)
    WHERE kind = 'phase_one' AND state IN ('queued', 'running');
