//! A job's id, on its own so that the error type can name it without the rest of
//! [`job`](crate::job).

use std::fmt;

/// A job's id (the `jobs.id` identity column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
