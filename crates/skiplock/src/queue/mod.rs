//! Pausing and resuming a queue, and every queue's state.
//!
//! A pause is a row of the schema's `queues` table, and the claim statement takes nothing
//! from a paused queue. So it holds for every worker of that queue on that schema, in every
//! process, whether it listens for notifications or not (LISTEN off, through PgBouncer in
//! transaction mode, restarted, or one that missed a notification), and for a manual
//! [`Client::claim`] too. Notifications only make it take effect sooner: a listening
//! worker stops asking at once on a pause, and claims at once on a resume.

use std::sync::Mutex;
use std::time::SystemTime;

use crate::caller_tx::Executor;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::input;

pub(crate) mod limits;
pub(crate) mod state;

pub use limits::{QueueLimits, Rate};

use state::time;
pub use state::QueueState;

/// The longest `by` a pause may record, in bytes.
pub const MAX_PAUSED_BY_LEN: usize = 256;

impl QueuePause {
    /// The longest "paused by" text accepted.
    pub const MAX_BY_LEN: usize = MAX_PAUSED_BY_LEN;
}

/// A queue's pause as [`Client::pause_queue`] or [`Client::resume_queue`] left it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuePause {
    /// The queue.
    pub queue: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Whether this call changed it: false when it was already paused (for a pause; then
    /// the first pause's time and author are kept) or not paused (for a resume).
    pub changed: bool,
    /// When the pause began (the start of the transaction that paused it, by the database's
    /// clock); `None` when not paused.
    pub paused_at: Option<SystemTime>,
    /// Who paused it, as the pausing call said; `None` when not paused or not said.
    pub paused_by: Option<String>,
}

impl Client {
    /// Pauses `queue` for every worker on this client's schema, in every process: from the
    /// moment this commits, no claim takes a job of that queue (the check is inside the claim
    /// statement), until [`Client::resume_queue`]. Jobs already running finish, and their
    /// outcomes are written as usual; jobs enqueued meanwhile wait. A worker started while
    /// the queue is paused claims nothing from it. `by` is recorded for operators (who paused
    /// it, and why; at most [`QueuePause::MAX_BY_LEN`] bytes).
    ///
    /// Pausing a paused queue changes nothing ([`QueuePause::changed`] is false). The pause
    /// lives in the database, not in a process: a worker that restarts does not resume it,
    /// and it stays until someone resumes the queue.
    pub async fn pause_queue(&self, queue: &str, by: Option<&str>) -> Result<QueuePause> {
        let conn = self.conn(PAUSE).await?;
        self.pause_queue_tx(&**conn, queue, by).await
    }

    /// [`Client::pause_queue`] through the caller's connection or transaction: through a
    /// transaction, the pause takes effect (and workers are told) only if and when it
    /// commits; claims meanwhile go on.
    pub async fn pause_queue_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        queue: &str,
        by: Option<&str>,
    ) -> Result<QueuePause> {
        input::queue_name(queue)?;
        let by = paused_by(by)?;
        let row = self
            .store()
            .queue_pause(conn.into_conn(), queue, by)
            .await?;
        Ok(QueuePause {
            queue: queue.to_owned(),
            paused: true,
            changed: row.changed,
            paused_at: time(row.paused_at_us),
            paused_by: row.paused_by,
        })
    }

    /// Resumes a paused `queue`: listening workers claim from it at once, the others at
    /// their next poll. Resuming a queue that is not paused changes nothing
    /// ([`QueuePause::changed`] is false).
    pub async fn resume_queue(&self, queue: &str) -> Result<QueuePause> {
        let conn = self.conn(RESUME).await?;
        self.resume_queue_tx(&**conn, queue).await
    }

    /// [`Client::resume_queue`] through the caller's connection or transaction: through a
    /// transaction, the queue resumes (and workers are told) only if and when it commits.
    pub async fn resume_queue_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        queue: &str,
    ) -> Result<QueuePause> {
        input::queue_name(queue)?;
        let changed = self.store().queue_resume(conn.into_conn(), queue).await?;
        Ok(QueuePause {
            queue: queue.to_owned(),
            paused: false,
            changed,
            paused_at: None,
            paused_by: None,
        })
    }

    /// Every queue that was ever paused or has queued or running jobs, sorted by name: its
    /// pause, and its queued, ready and running jobs. Reads only queued and running rows
    /// (the partial indexes), never the finished history; see [`Client::health`] for
    /// finished counts.
    pub async fn queues(&self) -> Result<Vec<QueueState>> {
        const OP: &str = "list the queues";
        let conn = self.conn(OP).await?;
        self.store().queue_list(&**conn).await
    }

    /// Whether `queue` is paused (see [`Client::pause_queue`]): one primary-key probe of the
    /// `queues` table, whatever the queue holds; `false` for a queue never paused, or
    /// unknown. [`Client::queues`] also says since when, by whom, and what waits.
    pub async fn queue_paused(&self, queue: &str) -> Result<bool> {
        const OP: &str = "read the queue's pause";
        input::queue_name(queue)?;
        let conn = self.conn(OP).await?;
        Ok(self.store().queue_flags(&**conn, queue).await?.0)
    }

    /// Whether `queue` is known on this schema: a `queues` row names it (it was paused once)
    /// or a queued or running job does. A command can refuse to pause a queue that is not
    /// known, which is most often a typo. Reads index probes only, never the finished
    /// history (a queue known only from finished jobs is not known here).
    pub async fn queue_known(&self, queue: &str) -> Result<bool> {
        const OP: &str = "look the queue up";
        input::queue_name(queue)?;
        let conn = self.conn(OP).await?;
        self.store().queue_known(&**conn, queue).await
    }
}

const PAUSE: &str = "pause a queue";
const RESUME: &str = "resume a queue";

/// Checks `by`: at most [`MAX_PAUSED_BY_LEN`] bytes, no NUL; empty counts as not said.
fn paused_by(by: Option<&str>) -> Result<Option<&str>> {
    paused_by_as("paused by", by)
}

/// [`paused_by`] for any "who did it" text, named `what` in its errors.
pub(crate) fn paused_by_as<'a>(what: &'static str, by: Option<&'a str>) -> Result<Option<&'a str>> {
    let Some(by) = by.filter(|b| !b.is_empty()) else {
        return Ok(None);
    };
    if by.len() > MAX_PAUSED_BY_LEN {
        return Err(Error::invalid(
            what,
            format!(
                "it is {} bytes long; the limit is {MAX_PAUSED_BY_LEN}",
                by.len()
            ),
        ));
    }
    if by.contains('\0') {
        return Err(Error::invalid(what, "it holds a NUL character"));
    }
    Ok(Some(by))
}

/// What a worker believes of the pause of one of its queues, to skip claims that would find
/// nothing: while it believes the queue paused, a notification of new jobs starts no claim.
/// The claim statement enforces the pause whatever this says; a wrong belief costs only a
/// claim that finds nothing, or a wake-up that waits for the poll or the resume.
///
/// Set by the lookup after a short claim and by pause and resume notifications; forgotten
/// when the LISTEN connection reconnects (a resume may have been missed). Each notification
/// or reconnect starts an epoch: a lookup's answer counts only if no epoch began while it
/// ran, so that a lookup that started before a resume cannot overrule it.
#[derive(Debug, Default)]
pub(crate) struct PauseHint(Mutex<HintState>);

#[derive(Debug, Default)]
struct HintState {
    paused: bool,
    epoch: u64,
}

impl PauseHint {
    fn state(&self) -> std::sync::MutexGuard<'_, HintState> {
        // Plain fields written whole: a poisoned lock holds nothing half-done.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the worker believes the queue paused.
    pub(crate) fn is_paused(&self) -> bool {
        self.state().paused
    }

    /// The current epoch: read it before a lookup starts, and hand it to
    /// [`PauseHint::looked_up`] with the lookup's answer.
    pub(crate) fn epoch(&self) -> u64 {
        self.state().epoch
    }

    /// A lookup that began in `epoch` found the queue `paused` (or not).
    pub(crate) fn looked_up(&self, queue: &str, paused: bool, epoch: u64) {
        let mut s = self.state();
        if s.epoch == epoch {
            Self::set(&mut s, queue, paused);
        }
    }

    /// A pause or resume notification.
    pub(crate) fn told(&self, queue: &str, paused: bool) {
        let mut s = self.state();
        s.epoch = s.epoch.wrapping_add(1);
        Self::set(&mut s, queue, paused);
    }

    /// Notifications may have been missed: believe nothing until the next lookup.
    pub(crate) fn forget(&self) {
        let mut s = self.state();
        s.epoch = s.epoch.wrapping_add(1);
        s.paused = false;
    }

    fn set(s: &mut HintState, queue: &str, paused: bool) {
        if s.paused == paused {
            return;
        }
        s.paused = paused;
        if paused {
            tracing::info!(
                %queue,
                "queue is paused: claiming nothing from it until it is resumed (running jobs finish)"
            );
        } else {
            tracing::info!(%queue, "queue resumed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_lookup_that_began_before_a_notification_is_ignored() {
        let h = PauseHint::default();
        let before = h.epoch();
        h.told("q", false);
        h.looked_up("q", true, before);
        assert!(!h.is_paused());
        let now = h.epoch();
        h.looked_up("q", true, now);
        assert!(h.is_paused());
        h.forget();
        assert!(!h.is_paused());
    }

    #[test]
    fn paused_by_is_checked() {
        assert_eq!(paused_by(None).unwrap(), None);
        assert_eq!(paused_by(Some("")).unwrap(), None);
        assert_eq!(paused_by(Some("ops")).unwrap(), Some("ops"));
        assert!(paused_by(Some("a\0b")).unwrap_err().is_invalid_input());
        let long = "x".repeat(MAX_PAUSED_BY_LEN + 1);
        assert!(paused_by(Some(&long)).unwrap_err().is_invalid_input());
    }

    #[test]
    fn times_before_and_after_the_epoch() {
        assert_eq!(time(None), None);
        assert_eq!(time(Some(0)), Some(UNIX_EPOCH));
        assert_eq!(
            time(Some(1_500_000)),
            Some(UNIX_EPOCH + Duration::from_micros(1_500_000))
        );
        assert_eq!(
            time(Some(-1)),
            UNIX_EPOCH.checked_sub(Duration::from_micros(1))
        );
    }
}
