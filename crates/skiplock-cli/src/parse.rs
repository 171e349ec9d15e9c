//! Arguments the command parses itself: durations.

use std::time::Duration;

/// Parses `250ms`, `30s`, `5m`, `2h`, `7d` (or a plain number of seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{s:?} is not a duration like 500ms, 30s, 5m, 2h or 7d ({e})"))
}

/// A duration, or `off`.
pub fn parse_optional_duration(s: &str) -> Result<Option<Duration>, String> {
    if matches!(s.trim(), "off" | "none" | "0") {
        Ok(None)
    } else {
        parse_duration(s).map(Some)
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
        assert_eq!(parse_optional_duration("off"), Ok(None));
    }
}
