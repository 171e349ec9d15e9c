-- Whether a queue is known: a `queues` row names it (it was paused once), or a job in any
-- state does. $1 is the queue's name. Index probes only, whatever the table keeps: the
-- primary key of `queues`, jobs_ready_idx (queued rows, led by the queue), jobs_held_queue_idx
-- (held rows, led by the queue), jobs_lease_idx (running rows and cancelled ones holding a
-- slot, led by the queue), jobs_leaseless_idx (running rows without a lease, led by the
-- queue; only ever written by hand) and jobs_finished_idx (finished rows, led by the queue).
SELECT EXISTS (SELECT 1 FROM {schema}.queues WHERE name = $1)
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE status = 'queued' AND held IS NULL
                                             AND queue = $1)
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE held IS NOT NULL AND queue = $1)
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE status IN ('running', 'failed')
                                             AND locked_until IS NOT NULL AND queue = $1)
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE status = 'running' AND locked_until IS NULL
                                             AND queue = $1)
    OR EXISTS (SELECT 1 FROM {schema}.jobs
               WHERE status IN ('done', 'failed') AND queue = $1)
    AS known
