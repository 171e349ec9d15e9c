//! Arguments the command parses itself: durations, each bounded, and a queue's limits.
//!
//! Every duration an option takes goes through [`parse_duration`], which refuses anything
//! above [`MAX_DURATION`] (100 years, the library's longest delay), so that no later sum or
//! deadline can overflow; options with a narrower sensible range parse with
//! [`within`], which names the option's range in its error. A queue's limits parse with
//! [`limit_or_off`] and [`rate_or_off`], which name the ranges of `skiplock::QueueLimits`.

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

/// Text built once from the library's constants, as the `&'static str` that clap's
/// `default_value` and `help` take: the command states no default or bound of its own, it
/// formats the library's (`default_value = text!(period_text(WorkerConfig::DEFAULT_LEASE))`).
macro_rules! text {
    ($text:expr) => {{
        static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| $text);
        TEXT.as_str()
    }};
}
pub(crate) use text;

/// A count with its thousands grouped by commas, as help texts write them: `10,000`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The largest limit (`skiplock::QueueLimits::MAX_LIMIT`), as a signed number for range checks.
const MAX_LIMIT: i64 = skiplock::QueueLimits::MAX_LIMIT as i64;

/// The rate period's bounds (`skiplock::QueueLimits::MIN_RATE_PERIOD`, `skiplock::QueueLimits::MAX_RATE_PERIOD`), as
/// [`within`] takes them: in milliseconds and in seconds.
const MIN_RATE_PERIOD_MS: u64 = 1;
const MAX_RATE_PERIOD_S: u64 = 86_400;

/// A count from 1 to `skiplock::QueueLimits::MAX_LIMIT`.
fn limit(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a whole number in 1..={MAX_LIMIT}"));
    }
    t.parse::<i64>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is outside 1..={MAX_LIMIT}"))
}

/// A queue's concurrency or per-key limit: 1 to `skiplock::QueueLimits::MAX_LIMIT`, or `off` (no such
/// limit: `Ok(None)`).
pub fn limit_or_off(s: &str) -> Result<Option<u32>, String> {
    if s.trim() == "off" {
        return Ok(None);
    }
    limit(s)
        .map(Some)
        .map_err(|e| format!("{e} (or off, to lift the limit)"))
}

/// A queue's rate limit, `N/DURATION` (at most N starts in any interval of DURATION: N from
/// 1 to `skiplock::QueueLimits::MAX_LIMIT`, DURATION from 1 ms to 1 day, in whole microseconds), or `off`
/// (no rate limit: `Ok(None)`).
pub fn rate_or_off(s: &str) -> Result<Option<(u32, Duration)>, String> {
    let t = s.trim();
    if t == "off" {
        return Ok(None);
    }
    let form = format!(
        "write N/DURATION with N in 1..={MAX_LIMIT} and DURATION in 1ms..=1d, e.g. 100/1s or \
         5/250ms, or off"
    );
    let Some((n, period)) = t.split_once('/') else {
        return Err(format!("{s:?} is not a rate: {form}"));
    };
    let n = limit(n).map_err(|e| format!("the count {e} ({form})"))?;
    if period.trim().is_empty() {
        return Err(format!("{s:?} has no period: {form}"));
    }
    let period = within::<MIN_RATE_PERIOD_MS, MAX_RATE_PERIOD_S>(period)
        .map_err(|e| format!("the period {e} ({form})"))?;
    if period.subsec_nanos() % 1000 != 0 {
        return Err(format!(
            "the period of {s:?} is not a whole number of microseconds ({form})"
        ));
    }
    Ok(Some((n, period)))
}

/// A rate period as `N/period` writes it, in the largest unit that divides it exactly
/// (`1s`, `250ms`, `90s`, `1d`, `1500us`): what [`rate_or_off`] reads back.
pub fn period_text(d: Duration) -> String {
    let us = d.as_micros();
    for (unit, size) in [
        ("d", 86_400_000_000u128),
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ] {
        if us >= size && us % size == 0 {
            return format!("{}{unit}", us / size);
        }
    }
    format!("{us}us")
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
    fn counts_group_their_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(10_000), "10,000");
        assert_eq!(grouped(1_000_000), "1,000,000");
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

    #[test]
    fn limits_follow_the_library() {
        assert_eq!(MAX_LIMIT, i64::from(skiplock::QueueLimits::MAX_LIMIT));
        assert_eq!(
            Duration::from_millis(MIN_RATE_PERIOD_MS),
            skiplock::QueueLimits::MIN_RATE_PERIOD
        );
        assert_eq!(
            Duration::from_secs(MAX_RATE_PERIOD_S),
            skiplock::QueueLimits::MAX_RATE_PERIOD
        );
        assert_eq!(limit_or_off("off"), Ok(None));
        assert_eq!(limit_or_off("1"), Ok(Some(1)));
        assert_eq!(limit_or_off(" 1000000 "), Ok(Some(1_000_000)));
        for bad in ["0", "-1", "1000001", "99999999999999999999999", "+0"] {
            let e = limit_or_off(bad).unwrap_err();
            assert!(e.contains("is outside 1..=1000000"), "{bad}: {e}");
        }
        for bad in ["abc", "", "1.5", "1e3", "5/1s"] {
            let e = limit_or_off(bad).unwrap_err();
            assert!(
                e.contains("not a whole number in 1..=1000000"),
                "{bad}: {e}"
            );
        }

        let ms = Duration::from_millis;
        assert_eq!(rate_or_off("off"), Ok(None));
        assert_eq!(rate_or_off("100/1s"), Ok(Some((100, ms(1000)))));
        assert_eq!(rate_or_off("5/250ms"), Ok(Some((5, ms(250)))));
        assert_eq!(rate_or_off("1/1ms"), Ok(Some((1, ms(1)))));
        assert_eq!(
            rate_or_off("1000000/1d"),
            Ok(Some((1_000_000, ms(86_400_000))))
        );
        for (bad, needle) in [
            ("0/1s", "the count \"0\" is outside 1..=1000000"),
            ("-1/1s", "the count \"-1\" is outside"),
            ("1000001/1s", "is outside 1..=1000000"),
            ("x/1s", "the count \"x\" is not a whole number"),
            ("10/0s", "the period \"0s\" is outside 1ms..=1d"),
            ("10/999us", "is outside 1ms..=1d"),
            ("10/2d", "the period \"2d\" is outside 1ms..=1d"),
            ("10/", "\"10/\" has no period"),
            ("10/soon", "not a duration"),
            ("10/1000500ns", "whole number of microseconds"),
            ("abc", "\"abc\" is not a rate"),
            ("10", "is not a rate"),
            ("", "is not a rate"),
        ] {
            let e = rate_or_off(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
            assert!(e.contains("N/DURATION"), "{bad}: {e}");
        }

        for (d, text) in [
            (ms(1000), "1s"),
            (ms(250), "250ms"),
            (ms(90_000), "90s"),
            (ms(86_400_000), "1d"),
            (ms(7_200_000), "2h"),
            (ms(300_000), "5m"),
            (Duration::from_micros(1500), "1500us"),
            (ms(1), "1ms"),
        ] {
            assert_eq!(period_text(d), text);
            let back = rate_or_off(&format!("7/{text}")).unwrap().unwrap();
            assert_eq!(back, (7, d), "{text}");
        }
    }
}
