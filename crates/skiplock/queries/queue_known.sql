-- Whether a queue is known: a `queues` row names it (it was paused once), or a queued or
-- running job does. $1 is the queue's name. Index probes only, whatever the table keeps:
-- the primary key of `queues`, jobs_ready_idx (queued rows, led by the queue) and
-- jobs_lease_idx (running rows, few). Finished rows are not read: no index leads with
-- their queue, and a queue known only from its history has nothing to pause or resume.
SELECT EXISTS (SELECT 1 FROM {schema}.queues WHERE name = $1)
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE status = 'queued' AND queue = $1)
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE status = 'running' AND queue = $1)
    AS known
