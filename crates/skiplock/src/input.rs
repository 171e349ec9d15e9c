//! Checks on everything a caller hands us, done before any SQL runs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// The longest queue or kind name accepted.
pub const MAX_NAME_LEN: usize = 128;

/// The deepest nesting of arrays and objects a payload may have (serde_json's own limit, so
/// that whatever we accept a worker can also read).
pub const MAX_PAYLOAD_DEPTH: usize = 128;

/// The default cap on one job's payload, in bytes of JSON text.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// The largest job output accepted by default, in bytes of JSON text (see
/// [`ClientBuilder::max_output_bytes`](crate::ClientBuilder::max_output_bytes)).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// The largest `max_attempts` a job may be given.
pub const MAX_ATTEMPTS_LIMIT: i32 = 10_000;

/// The furthest in the future a job may be scheduled.
pub const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The shortest and longest lease a claim or an extension may take.
pub const LEASE_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(24 * 3600));

/// Error messages longer than this are cut (on a character boundary) before they are stored.
pub const MAX_ERROR_LEN: usize = 16 * 1024;

/// A queue name: 1 to 128 characters from `[A-Za-z0-9_.-]`.
pub fn queue_name(name: &str) -> Result<()> {
    name_rule("queue name", name, &['_', '.', '-'])
}

/// A job kind: 1 to 128 characters from `[A-Za-z0-9_.:-]` (`:` allows Rust-style paths).
pub fn kind_name(name: &str) -> Result<()> {
    name_rule("job kind", name, &['_', '.', ':', '-'])
}

/// A job's key (what a queue's per-key limit counts) or sequence (whose members run one at
/// a time, in order): 1 to 128 characters from `[A-Za-z0-9_.:@/-]` (a tenant id, an
/// account, a host name, an e-mail address).
pub fn job_key(what: &'static str, name: &str) -> Result<()> {
    name_rule(what, name, &['_', '.', ':', '@', '/', '-'])
}

fn name_rule(what: &'static str, name: &str, extra: &[char]) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(what, "it is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            what,
            format!(
                "it is {} bytes long; the limit is {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || extra.contains(c)))
    {
        let allowed: String = extra.iter().map(|c| format!(" '{c}'")).collect();
        return Err(Error::invalid(
            what,
            format!("{c:?} is not allowed; use letters, digits and{allowed}"),
        ));
    }
    Ok(())
}

/// `max_attempts`: 1 to [`MAX_ATTEMPTS_LIMIT`].
pub fn max_attempts(n: i32) -> Result<()> {
    if !(1..=MAX_ATTEMPTS_LIMIT).contains(&n) {
        return Err(Error::invalid(
            "max_attempts",
            format!("{n} is outside 1..={MAX_ATTEMPTS_LIMIT}"),
        ));
    }
    Ok(())
}

/// A lease length, in whole microseconds.
pub fn lease_micros(lease: Duration) -> Result<i64> {
    let (lo, hi) = LEASE_RANGE;
    if lease < lo || lease > hi {
        return Err(Error::invalid(
            "lease",
            format!("{lease:?} is outside {lo:?}..={hi:?}"),
        ));
    }
    micros("lease", lease)
}

/// A delay from now, in whole microseconds.
pub fn delay_micros(delay: Duration) -> Result<i64> {
    if delay > MAX_DELAY {
        return Err(Error::invalid(
            "delay",
            format!("{delay:?} is more than 100 years"),
        ));
    }
    micros("delay", delay)
}

/// An absolute time, in microseconds since the Unix epoch (1970 to 9999).
pub fn timestamp_micros(t: SystemTime) -> Result<i64> {
    const YEAR_10000: u64 = 253_402_300_800;
    let since = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::invalid("run_at", "it is before 1970-01-01"))?;
    if since.as_secs() >= YEAR_10000 {
        return Err(Error::invalid("run_at", "it is after the year 9999"));
    }
    micros("run_at", since)
}

pub(crate) fn micros(what: &'static str, d: Duration) -> Result<i64> {
    i64::try_from(d.as_micros()).map_err(|_| Error::invalid(what, format!("{d:?} is too large")))
}

/// Checks a job's output: JSON text of at most `max_bytes` bytes that PostgreSQL can store
/// in `jsonb` (as [`payload`] checks a payload).
pub fn output(json: &str, max_bytes: usize) -> Result<()> {
    if json.len() > max_bytes {
        return Err(Error::invalid(
            "output",
            format!(
                "it is {} bytes; the limit is {max_bytes} (store large results elsewhere and output a reference to them)",
                json.len()
            ),
        ));
    }
    scan(json.as_bytes()).map_err(|e| match e {
        Error::Invalid { reason, .. } => Error::invalid("output", reason),
        other => other,
    })?;
    serde_json::from_str::<serde::de::IgnoredAny>(json)
        .map_err(|e| Error::invalid("output", format!("it is not valid JSON: {e}")))?;
    Ok(())
}

/// Checks a payload given as JSON text: well-formed, at most `max_bytes`, nested at most
/// [`MAX_PAYLOAD_DEPTH`] deep, and free of what PostgreSQL's `jsonb` cannot store
/// (`\u0000`, unpaired UTF-16 surrogates).
pub fn payload(json: &str, max_bytes: usize) -> Result<()> {
    if json.len() > max_bytes {
        return Err(Error::invalid(
            "payload",
            format!(
                "it is {} bytes; the limit is {max_bytes} (keep large data elsewhere and pass a reference to it)",
                json.len()
            ),
        ));
    }
    scan(json.as_bytes())?;
    serde_json::from_str::<serde::de::IgnoredAny>(json)
        .map_err(|e| Error::invalid("payload", format!("it is not valid JSON: {e}")))?;
    Ok(())
}

/// One pass over JSON text: nesting depth, and `\u` escapes that jsonb refuses. It never
/// fails on malformed input (the parser that follows reports that).
fn scan(b: &[u8]) -> Result<()> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'"' => in_string = false,
                b'\\' => {
                    if b.get(i + 1) == Some(&b'u') {
                        let cp = hex4(b, i + 2);
                        match cp {
                            Some(0) => {
                                return Err(Error::invalid(
                                    "payload",
                                    "it holds \\u0000, which PostgreSQL's jsonb cannot store",
                                ))
                            }
                            Some(0xD800..=0xDBFF) => {
                                let low = (b.get(i + 6) == Some(&b'\\')
                                    && b.get(i + 7) == Some(&b'u'))
                                .then(|| hex4(b, i + 8))
                                .flatten();
                                if !matches!(low, Some(0xDC00..=0xDFFF)) {
                                    return Err(lone_surrogate());
                                }
                                i += 12;
                                continue;
                            }
                            Some(0xDC00..=0xDFFF) => return Err(lone_surrogate()),
                            _ => {
                                i += 6;
                                continue;
                            }
                        }
                    }
                    i += 2;
                    continue;
                }
                _ => {}
            }
        } else {
            match c {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_PAYLOAD_DEPTH {
                        return Err(Error::invalid(
                            "payload",
                            format!("it is nested more than {MAX_PAYLOAD_DEPTH} levels deep"),
                        ));
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        i += 1;
    }
    Ok(())
}

fn lone_surrogate() -> Error {
    Error::invalid(
        "payload",
        "it holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)",
    )
}

fn hex4(b: &[u8], at: usize) -> Option<u32> {
    let s = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
    u32::from_str_radix(s, 16).ok()
}

/// Makes an error message storable: NULs removed, at most [`MAX_ERROR_LEN`] bytes (cut on a
/// character boundary, marked with `…`).
pub fn error_message(msg: &str) -> String {
    let mut s: String = msg.chars().filter(|&c| c != '\0').collect();
    if s.len() > MAX_ERROR_LEN {
        let mut cut = MAX_ERROR_LEN - '…'.len_utf8();
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(queue_name("default").is_ok());
        assert!(queue_name("emails.high-priority_2").is_ok());
        assert!(queue_name(&"q".repeat(128)).is_ok());
        for bad in [
            "",
            " ",
            "q'; DROP TABLE jobs;--",
            "\"; SELECT pg_sleep(10);--",
            "tab\t",
            "é",
            "a:b",
            &"q".repeat(129),
            &"q".repeat(10_000),
        ] {
            let e = queue_name(bad).unwrap_err();
            assert!(e.is_invalid_input());
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        assert!(kind_name("app::SendEmail").is_ok());
        assert!(kind_name("send email").is_err());
    }

    #[test]
    fn payloads() {
        let cap = 1000;
        assert!(
            payload(r#"{"a":[1,2,{"b":"x\\u0000y"}]}"#, cap).is_ok(),
            "escaped backslash is text"
        );
        assert!(
            payload(r#""\ud83d\ude00""#, cap).is_ok(),
            "a surrogate pair is fine"
        );
        for bad in [
            r#"{"a":"\u0000"}"#,
            r#"{"\u0000":1}"#,
            r#"[["\u0000"]]"#,
            r#""\ud800""#,
            r#""\udc00x""#,
            r#"{"a":"#,
            "{} trailing",
            "NaN",
            "",
        ] {
            let e = payload(bad, cap).unwrap_err();
            assert!(e.is_invalid_input(), "{bad}");
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(payload(&deep, usize::MAX)
            .unwrap_err()
            .to_string()
            .contains("nested"));
        let ok_deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(payload(&ok_deep, usize::MAX).is_ok());
        let at_cap = format!("\"{}\"", "x".repeat(cap - 2));
        assert!(payload(&at_cap, cap).is_ok());
        let over = format!("\"{}\"", "x".repeat(cap - 1));
        assert!(payload(&over, cap)
            .unwrap_err()
            .to_string()
            .contains("limit"));
    }

    #[test]
    fn numbers_and_times() {
        assert!(max_attempts(0).is_err());
        assert!(max_attempts(-1).is_err());
        assert!(max_attempts(i32::MAX).is_err());
        assert!(max_attempts(1).is_ok());
        assert!(lease_micros(Duration::ZERO).is_err());
        assert!(lease_micros(Duration::from_secs(100 * 365 * 86400)).is_err());
        assert_eq!(lease_micros(Duration::from_secs(300)).unwrap(), 300_000_000);
        assert!(delay_micros(Duration::MAX).is_err());
        assert!(timestamp_micros(UNIX_EPOCH - Duration::from_secs(1)).is_err());
        assert!(timestamp_micros(UNIX_EPOCH + Duration::from_secs(300_000_000_000)).is_err());
    }

    #[test]
    fn error_messages() {
        assert_eq!(error_message("a\0b"), "ab");
        let long = "é".repeat(MAX_ERROR_LEN);
        let cut = error_message(&long);
        assert!(cut.len() <= MAX_ERROR_LEN && cut.ends_with('…'));
    }
}
