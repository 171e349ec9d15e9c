//! Arguments the command parses itself: durations, each bounded.
//!
//! Every duration an option takes goes through [`parse_duration`], which refuses anything
//! above [`MAX_DURATION`] (100 years, the library's longest delay), so that no later sum or
//! deadline can overflow; options with a narrower sensible range parse with
//! [`within`], which names the option's range in its error.

use std::time::Duration;

/// The longest duration any option takes: 36,500 days (100 years of 365 days, the
/// library's longest delay).
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86400);

/// Parses `250ms`, `30s`, `5m`, `2h`, `7d` (or a plain number of seconds), at most
/// [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = match t.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(t)
            .map_err(|e| format!("{s:?} is not a duration like 500ms, 30s, 5m, 2h or 7d ({e})"))?,
    };
    if d > MAX_DURATION {
        return Err(format!("{s:?} is too long (at most 36500d, 100 years)"));
    }
    Ok(d)
}

/// A duration from `MIN_MS` milliseconds to `MAX_S` seconds, for an option whose sensible
/// range is narrower than [`parse_duration`]'s (use as `value_parser = within::<1000, 86400>`).
pub fn within<const MIN_MS: u64, const MAX_S: u64>(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    let (min, max) = (Duration::from_millis(MIN_MS), Duration::from_secs(MAX_S));
    if d < min || d > max {
        return Err(format!("{s:?} is outside {}..={}", show(min), show(max)));
    }
    Ok(d)
}

/// A bound as the options take it: whole days as `7d`, else as `humantime` writes it.
fn show(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 86_400 && secs % 86_400 == 0 && d.subsec_nanos() == 0 {
        format!("{}d", secs / 86_400)
    } else {
        humantime::format_duration(d).to_string()
    }
}

/// A duration in [`within`]'s range, or `off`.
pub fn optional_within<const MIN_MS: u64, const MAX_S: u64>(
    s: &str,
) -> Result<Option<Duration>, String> {
    if matches!(s.trim(), "off" | "none" | "0") {
        Ok(None)
    } else {
        within::<MIN_MS, MAX_S>(s).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("12"), Ok(Duration::from_secs(12)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn every_duration_is_bounded() {
        assert_eq!(parse_duration("36500d"), Ok(MAX_DURATION));
        for huge in ["36501d", "101y", "100000000d", "18446744073709551615"] {
            let e = parse_duration(huge).unwrap_err();
            assert!(e.contains("too long"), "{e}");
        }
        assert_eq!(within::<1000, 86400>("1d"), Ok(Duration::from_secs(86400)));
        let e = within::<1000, 86400>("2d").unwrap_err();
        assert_eq!(e, "\"2d\" is outside 1s..=1d");
        assert!(within::<1000, 86400>("999ms").is_err());
        assert_eq!(optional_within::<10, 604800>("off"), Ok(None));
        assert!(optional_within::<10, 604800>("100000000d").is_err());
    }
}
