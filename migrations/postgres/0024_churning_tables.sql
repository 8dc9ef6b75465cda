-- The tables every job, append, close and delivery writes churn: a job's row
-- leaves a dead version at each state it moves through, and every scan of
-- the queue walks past the dead ones until a vacuum takes them away. Where
-- the server's autovacuum runs, it visits these tables after a thousand dead
-- versions (or a fiftieth of the table) rather than a fifth of it, and
-- without pausing between pages. (memoryd also vacuums them itself past
-- MEMORYD_RECLAIM_DEAD_ROWS, for servers whose autovacuum is off or behind.)
DO $$
DECLARE
    churning TEXT;
BEGIN
    FOREACH churning IN ARRAY ARRAY['jobs', 'job_sessions', 'sessions', 'session_rollouts', 'rollouts',
                                     'events', 'webhook_deliveries', 'tenant_turns'] LOOP
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
            autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000,
            autovacuum_vacuum_cost_delay = 0)', churning);
    END LOOP;
END $$;
-- A claim rewrites its tenants' turns in a column no index holds: room left
-- on each page lets the new version stay beside the old one (a HOT update,
-- no new index entry).
ALTER TABLE tenant_turns SET (fillfactor = 50);
