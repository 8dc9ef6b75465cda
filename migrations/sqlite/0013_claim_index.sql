-- A tenant's queued jobs in the order a claim takes them: claims look at
-- each tenant's first few instead of sorting the whole queue.
CREATE INDEX jobs_queued_by_tenant ON jobs (tenant_id, run_after, created_at) WHERE state = 'queued';
