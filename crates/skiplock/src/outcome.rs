//! How an attempt ended, in one type: the executor makes it from a handler's result,
//! [`Client::complete`](crate::Client::complete) and [`Client::fail`](crate::Client::fail)
//! from their arguments, the completer counts by it, and `job_finish_many.sql` receives its
//! [`Outcome::sql_name`]: the only place the statement's outcome words are spelled in Rust.

use std::time::Duration;

use crate::input;
use crate::job::Backoff;

/// What to write for one finished attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The job succeeded: `done`.
    Complete,
    /// A retryable error: back to `queued` after `least(cap, base * 2^attempts)` (the
    /// formula is in `job_finish_many.sql`), or `failed` once the job has used
    /// `max_attempts`.
    Retry { error: String, backoff: Backoff },
    /// A permanent error: `failed` now.
    Discard { error: String },
    /// The handler asked to run again later: back to `queued` after `delay`, at no cost in
    /// attempts.
    Snooze { delay: Duration },
    /// The job was claimed or running when the worker stopped: back to `queued` at once, at
    /// no cost in attempts.
    HandBack,
    /// This worker has no handler for the job's kind: back to `queued` after `delay` (the
    /// worker's back-off for that kind), at no cost in attempts, with `error` (which starts
    /// with [`UNSERVED_PREFIX`]) in `last_error`, so that a worker that handles the kind runs
    /// it and the operator sees why it waits.
    Unserved { error: String, delay: Duration },
}

/// How `last_error` starts for a job handed back because its worker had no handler for its
/// kind: `stats` and the metrics count queued jobs whose error starts so.
pub(crate) const UNSERVED_PREFIX: &str = "unserved: ";

impl Outcome {
    /// A retryable error; `error` is made storable (see [`input::error_message`]).
    pub(crate) fn retry(error: &str, backoff: Backoff) -> Outcome {
        Outcome::Retry {
            error: input::error_message(error),
            backoff,
        }
    }

    /// A permanent error; `error` is made storable (see [`input::error_message`]).
    pub(crate) fn discard(error: &str) -> Outcome {
        Outcome::Discard {
            error: input::error_message(error),
        }
    }

    /// A job of a kind the worker has no handler for, handed back after `delay`.
    pub(crate) fn unserved(error: &str, delay: Duration) -> Outcome {
        Outcome::Unserved {
            error: input::error_message(&format!("{UNSERVED_PREFIX}{error}")),
            delay: delay.min(input::MAX_DELAY),
        }
    }

    /// A snooze; the delay is capped at [`input::MAX_DELAY`].
    pub(crate) fn snooze(delay: Duration) -> Outcome {
        Outcome::Snooze {
            delay: delay.min(input::MAX_DELAY),
        }
    }

    /// The word `job_finish_many.sql` expects for this outcome (its `$3`).
    pub(crate) fn sql_name(&self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Retry { .. } => "retry",
            Outcome::Discard { .. } => "discard",
            Outcome::Snooze { .. } => "snooze",
            Outcome::HandBack => "hand_back",
            Outcome::Unserved { .. } => "unserved",
        }
    }

    /// Whether the job goes back to the queue at no cost in attempts (a snooze, a hand-back).
    pub(crate) fn is_requeue(&self) -> bool {
        matches!(
            self,
            Outcome::Snooze { .. } | Outcome::HandBack | Outcome::Unserved { .. }
        )
    }

    /// The error text to keep in `last_error` (empty for outcomes that keep the old one).
    pub(crate) fn error(&self) -> &str {
        match self {
            Outcome::Retry { error, .. }
            | Outcome::Discard { error }
            | Outcome::Unserved { error, .. } => error,
            _ => "",
        }
    }

    /// The error text, for escaping it when the database's encoding cannot store it.
    pub(crate) fn error_mut(&mut self) -> Option<&mut String> {
        match self {
            Outcome::Retry { error, .. }
            | Outcome::Discard { error }
            | Outcome::Unserved { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The requeue delay in microseconds (zero but for a snooze or an unserved kind).
    pub(crate) fn delay_us(&self) -> i64 {
        match self {
            Outcome::Snooze { delay } | Outcome::Unserved { delay, .. } => micros(*delay),
            _ => 0,
        }
    }

    /// The backoff's base and cap in microseconds (zero but for a retry).
    pub(crate) fn backoff_us(&self) -> (i64, i64) {
        match self {
            Outcome::Retry { backoff, .. } => (micros(backoff.base()), micros(backoff.cap())),
            _ => (0, 0),
        }
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_a_word_the_statement_knows() {
        let sql = include_str!("../queries/job_finish_many.sql");
        for o in [
            Outcome::Complete,
            Outcome::retry("x", Backoff::default()),
            Outcome::discard("x"),
            Outcome::snooze(Duration::from_secs(1)),
            Outcome::HandBack,
            Outcome::unserved("x", Duration::from_secs(1)),
        ] {
            let word = format!("'{}'", o.sql_name());
            assert!(sql.contains(&word), "{word} is not in job_finish_many.sql");
        }
    }

    #[test]
    fn only_a_snooze_has_a_delay_and_only_a_retry_a_backoff() {
        assert_eq!(Outcome::snooze(Duration::from_millis(2)).delay_us(), 2_000);
        assert_eq!(Outcome::HandBack.delay_us(), 0);
        assert_eq!(Outcome::discard("x").backoff_us(), (0, 0));
        assert_eq!(
            Outcome::retry("x", Backoff::default()).backoff_us(),
            (10_000_000, 3_600_000_000)
        );
        assert_eq!(Outcome::retry("a\0b", Backoff::default()).error(), "ab");
    }
}
