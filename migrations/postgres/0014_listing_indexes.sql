-- The tenant listing pages oldest first and counts each tenant's keys: a
-- page reads its own rows only, whatever the number of tenants.
CREATE INDEX tenants_by_age ON tenants (created_at, id);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id);
-- The job gauges count the unfinished jobs only: a scrape's cost follows the
-- queue, not the finished history.
CREATE INDEX jobs_unfinished ON jobs (kind, state) WHERE state IN ('queued', 'running');
