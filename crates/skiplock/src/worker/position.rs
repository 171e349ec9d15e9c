//! Where a queue's claims start.
//!
//! A claim scans the ready index from the front of its queue. Normally the entries it passes
//! there are few: the index entries of jobs already claimed point at row versions that every
//! transaction sees as gone, and a scan marks them dead so that the next one skips them. A
//! snapshot held open somewhere on the server (a long transaction, an idle-in-transaction
//! session, a long report on a replica with feedback) keeps those row versions alive for it,
//! so every claim from the front walks the entries of every job claimed since the snapshot
//! began, and the walk grows with every job (tens of thousands of entries a minute).
//!
//! When a claim from the front becomes slow ([`SLOW`]), the producer starts its claims near
//! where its last claim ended: [`LAG`] before the claim order's key of the last job it took
//! (`$4, $5, $6` of `job_claim.sql`, a range of the index), so that a job whose enqueue
//! committed a moment after a later one was claimed is still ahead of the claims. It still
//! claims from the front at least once per [`FRONT_EVERY`] (or [`FRONT_SHARE`] times as long
//! as that claim took, whichever is longer: the walk from the front grows all the time the
//! snapshot is held), so that a job placed before the key (a higher priority, an earlier
//! `run_at`, a job another claimer skipped and gave back) waits at most that long while
//! claims go on (a short claim from the key wakes the producer for that claim from the front
//! when it is due, so an idle queue gets one too). It goes back to the front for good when a
//! claim from the front is fast again ([`SLOW`] / 4), or no more than three times the cost of
//! one from the key (the machine is just busy). It logs the first switch to the key and a
//! return to a fast front at `info`, other switches at `debug`. Draining
//! (`Mode::UntilIdle`) takes only an empty claim from the front for an empty queue.

use std::time::Duration;

use tokio::time::Instant;

use crate::db::job::After;
use crate::job::ClaimedJob;

/// A claim from the front whose statement takes longer than this starts claims at the key.
pub(crate) const SLOW: Duration = Duration::from_millis(20);

/// While claims start at the key, one from the front at least this often, or
/// [`FRONT_SHARE`] times as long as the last one took, whichever is longer.
pub(crate) const FRONT_EVERY: Duration = Duration::from_secs(1);

/// Claims from the front take at most about a tenth of the time of one connection.
pub(crate) const FRONT_SHARE: u32 = 10;

/// Claims from the key start this far before the key's `run_at`: a job whose enqueue began
/// before the last claimed job's but committed after it was claimed (several enqueuing
/// connections) is still ahead of the claims, not left for the next claim from the front.
/// The entries they walk again are this long's worth of claimed jobs (a few hundred at
/// 1,000 jobs/s), not everything since the snapshot began.
pub(crate) const LAG: Duration = Duration::from_millis(500);

/// One queue's claim position.
pub(crate) struct Position {
    /// The claim order's key of the furthest job claimed since the last claim from the front.
    key: Option<After>,
    /// Claims start at `key`.
    on: bool,
    /// Kept on whatever the costs say (a test seam).
    forced: bool,
    /// When the last claim from the front started.
    last_front: Option<Instant>,
    /// The statement time of the last claim from the key.
    key_cost: Option<Duration>,
    /// The statement time of the last claim from the front.
    front_cost: Duration,
    /// The switch to the key was logged at `info` since the front was last fast.
    told: bool,
}

impl Position {
    /// `forced`: claims start at the key from the first claim on, and never go back.
    pub(crate) fn new(forced: bool) -> Position {
        Position {
            key: None,
            on: forced,
            forced,
            last_front: None,
            key_cost: None,
            front_cost: Duration::ZERO,
            told: false,
        }
    }

    /// How long after the last claim from the front the next one is due.
    fn front_every(&self) -> Duration {
        FRONT_EVERY.max(self.front_cost.saturating_mul(FRONT_SHARE))
    }

    /// Where the next claim starts (at `now`).
    pub(crate) fn next(&mut self, now: Instant) -> After {
        let every = self.front_every();
        match self.key {
            Some(key) if self.on && self.last_front.is_some_and(|t| now < t + every) => {
                key.lagged(LAG)
            }
            _ => {
                self.last_front = Some(now);
                After::FRONT
            }
        }
    }

    /// When the next claim from the front is due, while claims start at the key: a short
    /// claim from the key wakes the producer then, so that a job placed before the key waits
    /// at most [`FRONT_EVERY`] after the last claim from the front even if nothing else comes.
    pub(crate) fn front_due(&self) -> Option<Instant> {
        match (self.on, self.key, self.last_front) {
            (true, Some(_), Some(t)) => Some(t + self.front_every()),
            _ => None,
        }
    }

    /// The next claim starts from the front, whatever the time.
    pub(crate) fn front_next(&mut self) {
        self.last_front = None;
    }

    /// Where a lookup of the next due job starts: where the claims do.
    pub(crate) fn lookup(&self) -> After {
        match self.key {
            Some(key) if self.on => key.lagged(LAG),
            _ => After::FRONT,
        }
    }

    /// A claim from `from` ran its statement in `cost` and took `jobs`.
    pub(crate) fn claimed(
        &mut self,
        queue: &str,
        from: After,
        cost: Duration,
        jobs: &[ClaimedJob],
    ) {
        let last = jobs.iter().map(After::of).max();
        if from != After::FRONT {
            self.key_cost = Some(cost);
            if let Some(last) = last {
                self.key = Some(self.key.map_or(last, |k| k.max(last)));
            }
            return;
        }
        self.front_cost = cost;
        // The front claim's scan passed everything before its last job.
        if let Some(last) = last {
            self.key = Some(last);
        }
        if self.forced {
            return;
        }
        if !self.on && cost > SLOW {
            self.on = true;
            if std::mem::replace(&mut self.told, true) {
                tracing::debug!(
                    queue,
                    front_ms = cost.as_secs_f64() * 1e3,
                    "claims start where the last one ended"
                );
                return;
            }
            tracing::info!(
                queue,
                front_ms = cost.as_secs_f64() * 1e3,
                "a claim from the front of the queue is slow (most likely a snapshot held \
                 open on the server keeps the index entries of claimed jobs): claims start \
                 where the last one ended, and from the front once a second"
            );
        } else if self.on
            && (cost < SLOW / 4 || self.key_cost.is_some_and(|k| cost < k.saturating_mul(3)))
        {
            self.on = false;
            self.key_cost = None;
            if cost >= SLOW / 4 {
                // A busy machine, or a held snapshot on a busy one: quietly.
                tracing::debug!(
                    queue,
                    front_ms = cost.as_secs_f64() * 1e3,
                    "claims start from the front of the queue again"
                );
                return;
            }
            self.told = false;
            tracing::info!(
                queue,
                front_ms = cost.as_secs_f64() * 1e3,
                "claims start from the front of the queue again"
            );
        }
    }

    /// Claims start at the key.
    #[cfg(test)]
    fn is_on(&self) -> bool {
        self.on
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::job::JobId;

    fn job(priority: i16, id: i64) -> ClaimedJob {
        job_at(priority, id, 1_000)
    }

    #[test]
    fn a_slow_front_claim_turns_the_key_on_and_the_front_comes_back_once_a_second() {
        let t0 = Instant::now();
        let mut p = Position::new(false);
        assert_eq!(p.next(t0), After::FRONT);
        p.claimed("q", After::FRONT, Duration::from_millis(1), &[job(0, 5)]);
        assert!(!p.is_on(), "a fast front claim changes nothing");
        assert_eq!(p.next(t0), After::FRONT);
        assert_eq!(p.lookup(), After::FRONT);
        p.claimed("q", After::FRONT, SLOW * 2, &[job(0, 7), job(0, 9)]);
        assert!(p.is_on());
        // The front claim just started: the next ones start at its last job.
        let key = After::of(&job(0, 9)).lagged(LAG);
        assert_eq!(p.next(t0 + Duration::from_millis(10)), key);
        assert_eq!(p.lookup(), key);
        p.claimed("q", key, Duration::from_millis(1), &[job(0, 12)]);
        assert_eq!(
            p.next(t0 + Duration::from_millis(20)),
            After::of(&job(0, 12)).lagged(LAG)
        );
        // An empty claim from the key leaves it where it is.
        p.claimed("q", After::of(&job(0, 12)), Duration::from_millis(1), &[]);
        assert_eq!(
            p.next(t0 + Duration::from_millis(30)),
            After::of(&job(0, 12)).lagged(LAG)
        );
        assert_eq!(p.front_due(), Some(t0 + FRONT_EVERY));
        // A second on: from the front, then at the key again.
        assert_eq!(p.next(t0 + FRONT_EVERY), After::FRONT);
        assert_eq!(
            p.next(t0 + FRONT_EVERY + Duration::from_millis(1)),
            After::of(&job(0, 12)).lagged(LAG)
        );
        // Asked for: from the front at once.
        p.front_next();
        assert_eq!(
            p.next(t0 + FRONT_EVERY + Duration::from_millis(2)),
            After::FRONT
        );
        // A front claim that found a higher priority job moves the key back to it.
        p.claimed("q", After::FRONT, SLOW * 2, &[job(-5, 40)]);
        assert!(p.is_on());
        assert_eq!(p.lookup(), After::of(&job(-5, 40)).lagged(LAG));
        // A fast front claim turns it off.
        p.claimed("q", After::FRONT, SLOW / 8, &[]);
        assert!(!p.is_on());
        assert_eq!(p.front_due(), None);
        assert_eq!(
            p.next(t0 + FRONT_EVERY + Duration::from_millis(3)),
            After::FRONT
        );
    }

    #[test]
    fn a_front_claim_no_dearer_than_three_from_the_key_turns_it_off() {
        let t0 = Instant::now();
        let mut p = Position::new(false);
        assert_eq!(p.next(t0), After::FRONT);
        p.claimed("q", After::FRONT, SLOW * 2, &[job(0, 1)]);
        let key = p.next(t0 + Duration::from_millis(1));
        assert_ne!(key, After::FRONT);
        // Busy machine: a claim from the key costs nearly as much.
        p.claimed("q", key, SLOW, &[job(0, 2)]);
        p.claimed("q", After::FRONT, SLOW * 2, &[]);
        assert!(!p.is_on());
        // A slow one turns it on again at once (a held snapshot on a busy machine).
        p.claimed("q", After::FRONT, SLOW * 2, &[job(0, 3)]);
        assert!(p.is_on());
    }

    #[test]
    fn forced_stays_on() {
        let mut p = Position::new(true);
        let t0 = Instant::now();
        assert_eq!(p.next(t0), After::FRONT);
        p.claimed("q", After::FRONT, Duration::ZERO, &[job(0, 1)]);
        assert!(p.is_on());
        assert_eq!(p.next(t0), After::of(&job(0, 1)).lagged(LAG));
    }
    fn job_at(priority: i16, id: i64, at_s: u64) -> ClaimedJob {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(at_s);
        ClaimedJob {
            id: JobId(id),
            queue: "q".into(),
            kind: "k".into(),
            payload: "{}".into(),
            attempt: 1,
            max_attempts: 3,
            priority,
            run_at: at,
            created_at: at,
            locked_until: at,
        }
    }

    #[test]
    fn claims_from_the_key_start_lag_before_it_and_a_dear_front_comes_less_often() {
        let t0 = Instant::now();
        let mut p = Position::new(false);
        assert_eq!(p.next(t0), After::FRONT);
        // A front claim of 300 ms: on, and the next front claim is due 3 s after it.
        p.claimed(
            "q",
            After::FRONT,
            Duration::from_millis(300),
            &[job_at(2, 9, 1_000)],
        );
        let key = p.next(t0 + Duration::from_millis(1));
        assert_eq!(
            key,
            After {
                priority: 2,
                run_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000) - LAG),
                id: i64::MIN,
            }
        );
        assert_eq!(p.front_due(), Some(t0 + Duration::from_secs(3)));
        assert_eq!(p.next(t0 + Duration::from_secs(2)), key);
        assert_eq!(p.next(t0 + Duration::from_secs(3)), After::FRONT);
    }
}
