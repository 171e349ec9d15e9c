//! Flow control: a queue's global concurrency limit, per-key concurrency limit and rate
//! limit, stored in its `queues` row so that every process agrees on them (migration 11).
//!
//! A limited queue's claim (`claim_limited()`, migrations 11 and 12) locks the queue's row, so the
//! claims of one limited queue run one at a time, and counts the slots in use and the starts
//! in the rate window with fresh snapshots under that lock: the database never starts more
//! jobs than a limit allows, whatever the interleaving of workers and processes.
//!
//! - **Concurrency**: at most N jobs of the queue hold a slot at once. A running job holds
//!   one; so does a cancelled job until its lease ends (its handler may still run). A job
//!   whose worker died holds its slot until the reaper moves it, within one reap interval
//!   after its lease ends. A worker that is slow rather than dead loses its slot the same
//!   way: the reaper moves the job, another worker may start it, and the slow attempt's
//!   heartbeat and outcome are refused (the attempt fence), so the database never counts
//!   more than N.
//! - **Per key**: at most N running jobs per key ([`NewJob::key`](crate::NewJob::key)). A
//!   full key never blocks another, and claims go round robin across keys: every key with
//!   a free slot gives its first job before any gives a second. A job without a key is not
//!   subject to this limit.
//! - **Rate**: at most N starts in any interval of the period (a sliding window, not a fixed
//!   one and not a token bucket: no burst above N).
//!
//! All limits of a queue apply together. A worker that cannot start a job for want of a slot
//! waits for a notification that the outcome freeing one sends (only while a limit binds);
//! for want of room in the rate window, it sleeps until the window has room.

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::input;

/// The largest limit (concurrency, per key, starts per period).
pub const MAX_LIMIT: u32 = 1_000_000;
/// The shortest rate period.
pub const MIN_RATE_PERIOD: Duration = Duration::from_millis(1);
/// The longest rate period.
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(86_400);

impl QueueLimits {
    /// The largest limit accepted (concurrency, per key, or jobs per rate period).
    pub const MAX_LIMIT: u32 = MAX_LIMIT;
    /// The shortest rate period.
    pub const MIN_RATE_PERIOD: Duration = MIN_RATE_PERIOD;
    /// The longest rate period (one day).
    pub const MAX_RATE_PERIOD: Duration = MAX_RATE_PERIOD;
}

/// At most `limit` starts in any interval of `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts allowed per period (1 to [`QueueLimits::MAX_LIMIT`]).
    pub limit: u32,
    /// The window ([`QueueLimits::MIN_RATE_PERIOD`] to [`QueueLimits::MAX_RATE_PERIOD`], in whole microseconds).
    pub period: Duration,
}

/// A queue's limits; `None` is no such limit. Build with [`QueueLimits::none`] and the
/// setters, and apply with [`Client::set_queue_limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueLimits {
    /// At most this many jobs of the queue run at once, across every worker and process.
    pub concurrency: Option<u32>,
    /// At most this many jobs of one key run at once.
    pub per_key: Option<u32>,
    /// At most this many starts in any interval of the period.
    pub rate: Option<Rate>,
}

impl QueueLimits {
    /// No limit.
    pub fn none() -> Self {
        Self::default()
    }

    /// At most `n` jobs of the queue run at once.
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// At most `n` jobs of one key run at once.
    pub fn per_key(mut self, n: u32) -> Self {
        self.per_key = Some(n);
        self
    }

    /// At most `limit` starts in any interval of `period`.
    pub fn rate(mut self, limit: u32, period: Duration) -> Self {
        self.rate = Some(Rate { limit, period });
        self
    }

    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.concurrency.is_some() || self.per_key.is_some() || self.rate.is_some()
    }

    /// Checks every limit; the values bound to `queue_limit.sql`.
    pub(crate) fn encode(&self) -> Result<EncodedLimits> {
        let n = |what: &'static str, v: u32| -> Result<i32> {
            if v == 0 || v > MAX_LIMIT {
                return Err(Error::invalid(
                    what,
                    format!("{v} is out of range: it must be 1 to {MAX_LIMIT}"),
                ));
            }
            Ok(i32::try_from(v).unwrap_or(i32::MAX))
        };
        let concurrency = self.concurrency.map(|v| n("concurrency", v)).transpose()?;
        let per_key = self.per_key.map(|v| n("per-key limit", v)).transpose()?;
        let (rate_limit, rate_period_us) = match self.rate {
            None => (None, None),
            Some(r) => {
                let limit = n("rate", r.limit)?;
                if r.period < MIN_RATE_PERIOD || r.period > MAX_RATE_PERIOD {
                    return Err(Error::invalid(
                        "rate period",
                        format!(
                            "{:?} is out of range: it must be {MIN_RATE_PERIOD:?} to 1 day",
                            r.period
                        ),
                    ));
                }
                if r.period.subsec_nanos() % 1000 != 0 {
                    return Err(Error::invalid(
                        "rate period",
                        format!("{:?} is not a whole number of microseconds", r.period),
                    ));
                }
                let us = i64::try_from(r.period.as_micros()).unwrap_or(i64::MAX);
                (Some(limit), Some(us))
            }
        };
        Ok(EncodedLimits {
            concurrency,
            per_key,
            rate_limit,
            rate_period_us,
        })
    }

    /// The limits as `queue_list.sql` reads them.
    pub(crate) fn decode(
        concurrency: Option<i32>,
        per_key: Option<i32>,
        rate_limit: Option<i32>,
        rate_period_us: Option<i64>,
    ) -> Self {
        let u = |v: Option<i32>| v.and_then(|v| u32::try_from(v).ok());
        QueueLimits {
            concurrency: u(concurrency),
            per_key: u(per_key),
            rate: match (u(rate_limit), rate_period_us) {
                (Some(limit), Some(us)) => Some(Rate {
                    limit,
                    period: Duration::from_micros(us.unsigned_abs()),
                }),
                _ => None,
            },
        }
    }
}

/// Checked limits, as bound to `queue_limit.sql`.
#[derive(Debug)]
pub(crate) struct EncodedLimits {
    pub concurrency: Option<i32>,
    pub per_key: Option<i32>,
    pub rate_limit: Option<i32>,
    pub rate_period_us: Option<i64>,
}

impl Client {
    /// Sets `queue`'s limits for every worker on this client's schema, in every process,
    /// replacing the ones it had (a `None` lifts that limit; [`QueueLimits::none`] lifts
    /// them all). Any valid queue name, whether it has jobs yet or not. `by` is recorded
    /// for operators (at most 256 bytes).
    ///
    /// Every claim that starts after this commits obeys the new limits; a claim in flight
    /// at that moment may still start what the old ones allowed. Lowering a limit below
    /// what runs now stops nothing: running jobs finish, and no job starts until the count
    /// is below the limit. Listening workers are told at once, so a raised limit is used
    /// without waiting for a freed slot or the poll.
    pub async fn set_queue_limits(
        &self,
        queue: &str,
        limits: QueueLimits,
        by: Option<&str>,
    ) -> Result<()> {
        const OP: &str = "set a queue's limits";
        input::queue_name(queue)?;
        let by = super::paused_by_as("limits set by", by)?;
        let e = limits.encode()?;
        let conn = self.conn(OP).await?;
        self.store().queue_limit(&**conn, queue, &e, by).await
    }

    /// `queue`'s limits ([`QueueLimits::none`] for a queue with none, or unknown).
    pub async fn queue_limits(&self, queue: &str) -> Result<QueueLimits> {
        input::queue_name(queue)?;
        Ok(self
            .queues()
            .await?
            .into_iter()
            .find(|q| q.queue == queue)
            .map(|q| q.limits)
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked() {
        assert!(QueueLimits::none().encode().is_ok());
        assert!(QueueLimits::none().concurrency(0).encode().is_err());
        assert!(QueueLimits::none()
            .concurrency(MAX_LIMIT + 1)
            .encode()
            .is_err());
        assert!(QueueLimits::none().per_key(0).encode().is_err());
        assert!(QueueLimits::none()
            .rate(0, Duration::from_secs(1))
            .encode()
            .is_err());
        assert!(QueueLimits::none()
            .rate(1, Duration::from_micros(999))
            .encode()
            .is_err());
        assert!(QueueLimits::none()
            .rate(1, Duration::from_secs(86_401))
            .encode()
            .is_err());
        assert!(QueueLimits::none()
            .rate(1, Duration::from_nanos(1_000_001))
            .encode()
            .is_err());
        let e = QueueLimits::none()
            .concurrency(5)
            .per_key(2)
            .rate(100, Duration::from_secs(1))
            .encode()
            .unwrap();
        assert_eq!(
            (e.concurrency, e.per_key, e.rate_limit, e.rate_period_us),
            (Some(5), Some(2), Some(100), Some(1_000_000))
        );
    }
}
