-- Schema version 2: indexes of the maintenance paths (promote, recover,
-- purge), each partial so that it holds only the rows its task looks at.
CREATE INDEX jobs_due ON jobs (run_at) WHERE state = 'scheduled';

CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';

CREATE INDEX jobs_finished ON jobs (state, finished_at)
    WHERE (state = 'completed' OR state = 'dead' OR state = 'cancelled');
