//! Backoff for reconnects and retries, with jitter.

use std::time::Duration;

/// A small pseudo-random jitter in `0..max` for reconnect and retry backoffs (no need for
/// cryptographic randomness; only to keep workers from moving in lockstep).
pub(crate) fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    let r = h.finish();
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(r % max_us)
}

/// Capped exponential backoff with jitter: 100 ms, 200 ms, ... up to `cap`.
pub(crate) fn backoff(failures: u32, cap: Duration) -> Duration {
    let base = Duration::from_millis(100).saturating_mul(1u32 << failures.min(16));
    let d = base.min(cap);
    d / 2 + jitter(d / 2 + Duration::from_millis(1))
}
