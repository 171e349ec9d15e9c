//! Fire-time computation and the missed-fire policies, without a database.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::schedule::{plan, Plan, Spec};
use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn ts(v: &[&str]) -> Vec<DateTime<Utc>> {
    v.iter().map(|s| t(s)).collect()
}

fn spec(cron: &str, zone: &str) -> Spec {
    Spec::parse(cron, zone).unwrap()
}

const G: Duration = Duration::from_secs(10);

#[test]
fn missed_policies_parse_and_print() {
    for s in ["skip", "latest", "catch-up=1", "catch-up=1000"] {
        assert_eq!(s.parse::<Missed>().unwrap().to_string(), s);
    }
    assert_eq!("latest".parse::<Missed>().unwrap(), Missed::default());
    for bad in [
        "",
        "all",
        "catch-up",
        "catch-up=0",
        "catch-up=1001",
        "catch-up=-1",
    ] {
        let e = bad.parse::<Missed>().unwrap_err();
        assert!(e.is_invalid_input(), "{bad}");
        assert!(!e.to_string().contains('\n'));
    }
}

#[test]
fn five_or_six_fields_a_zone_and_clear_errors() {
    let every_minute = spec("* * * * *", "UTC");
    assert_eq!(
        every_minute.next_after(t("2024-01-01T00:00:30Z")),
        Some(t("2024-01-01T00:01:00Z"))
    );
    let every_second = spec("* * * * * *", "UTC");
    assert_eq!(
        every_second.next_after(t("2024-01-01T00:00:30Z")),
        Some(t("2024-01-01T00:00:31Z"))
    );
    let berlin_nine = spec("0 9 * * *", "Europe/Berlin");
    assert_eq!(
        berlin_nine.next_after(t("2024-01-01T00:00:00Z")),
        Some(t("2024-01-01T08:00:00Z"))
    );
    for (cron, zone, needle) in [
        ("* * * *", "UTC", "cron expression"),
        ("* * * * * * *", "UTC", "cron expression"),
        ("61 * * * *", "UTC", "cron expression"),
        ("banana", "UTC", "cron expression"),
        ("", "UTC", "cron expression"),
        ("0 0 30 2 *", "UTC", "never fires"),
        ("* * * * *", "Europe/Berln", "time zone"),
        ("* * * * *", "", "time zone"),
    ] {
        let e = Spec::parse(cron, zone).unwrap_err();
        let msg = e.to_string();
        assert!(
            e.is_invalid_input() && msg.contains(needle),
            "{cron}: {msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
    }
}

#[test]
fn schedules_are_checked_field_by_field() {
    let ok = Schedule::new("nightly", "0 3 * * *", "report");
    ok.check(1024).unwrap();
    for (s, needle) in [
        (Schedule::new("bad name", "* * * * *", "k"), "schedule name"),
        (Schedule::new("", "* * * * *", "k"), "schedule name"),
        (Schedule::new("n", "* * * * *", "bad kind"), "job kind"),
        (
            Schedule::new("n", "* * * * *", "k").queue("bad/queue"),
            "queue name",
        ),
        (
            Schedule::new("n", "* * * * *", "k").payload_json("{not json"),
            "payload",
        ),
        (
            Schedule::new("n", "* * * * *", "k").payload_json("[1,2,3,4,5,6,7,8,9,10]"),
            "payload",
        ),
        (
            Schedule::new("n", "* * * * *", "k").max_attempts(0),
            "max_attempts",
        ),
        (
            Schedule::new("n", "* * * * *", "k").missed(Missed::CatchUp(0)),
            "missed-fire policy",
        ),
        (
            Schedule::new("n", "* * * * *", "k").time_zone("Mars/Olympus"),
            "time zone",
        ),
    ] {
        let e = s.check(16).unwrap_err();
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[test]
fn nothing_is_due_before_the_first_fire_after_the_cursor() {
    let s = spec("0 * * * *", "UTC");
    let p = plan(
        &s,
        t("2024-01-01T10:00:00Z"),
        t("2024-01-01T10:59:59.999Z"),
        G,
        Missed::Latest,
    );
    assert_eq!(
        p,
        Plan {
            fires: vec![],
            cursor: None,
            missed: 0,
            next: Some(t("2024-01-01T11:00:00Z")),
        }
    );
}

#[test]
fn a_fire_due_just_now_is_on_time() {
    let s = spec("0 * * * *", "UTC");
    for now in [
        "2024-01-01T11:00:00Z",
        "2024-01-01T11:00:09.9Z",
        "2024-01-01T11:00:10Z",
    ] {
        let p = plan(&s, t("2024-01-01T10:00:00Z"), t(now), G, Missed::Skip);
        assert_eq!(p.fires, ts(&["2024-01-01T11:00:00Z"]), "{now}");
        assert_eq!(p.cursor, Some(t("2024-01-01T11:00:00Z")));
        assert_eq!(p.missed, 0);
        assert_eq!(p.next, Some(t("2024-01-01T12:00:00Z")));
    }
}

#[test]
fn every_on_time_fire_is_enqueued_whatever_the_policy() {
    // A scheduler that came 5 s late to a schedule that fires every second.
    let s = spec("* * * * * *", "UTC");
    for policy in [Missed::Skip, Missed::Latest, Missed::CatchUp(3)] {
        let p = plan(
            &s,
            t("2024-01-01T00:00:00Z"),
            t("2024-01-01T00:00:05.5Z"),
            G,
            policy,
        );
        assert_eq!(
            p.fires,
            ts(&[
                "2024-01-01T00:00:01Z",
                "2024-01-01T00:00:02Z",
                "2024-01-01T00:00:03Z",
                "2024-01-01T00:00:04Z",
                "2024-01-01T00:00:05Z",
            ])
        );
        assert_eq!(p.missed, 0);
        assert_eq!(p.cursor, Some(t("2024-01-01T00:00:05Z")));
    }
}

#[test]
fn missed_fires_follow_the_policy() {
    // Hourly, no worker from 00:30 to 05:00:20: the fires of 01:00 to 04:00 were missed, the
    // one of 05:00 is on time.
    let s = spec("0 * * * *", "UTC");
    let cursor = t("2024-01-01T00:00:00Z");
    let now = t("2024-01-01T05:00:05Z");
    let skip = plan(&s, cursor, now, G, Missed::Skip);
    assert_eq!(skip.fires, ts(&["2024-01-01T05:00:00Z"]));
    assert_eq!(skip.missed, 4);
    let latest = plan(&s, cursor, now, G, Missed::Latest);
    assert_eq!(
        latest.fires,
        ts(&["2024-01-01T04:00:00Z", "2024-01-01T05:00:00Z"])
    );
    assert_eq!(latest.missed, 3);
    let two = plan(&s, cursor, now, G, Missed::CatchUp(2));
    assert_eq!(
        two.fires,
        ts(&[
            "2024-01-01T03:00:00Z",
            "2024-01-01T04:00:00Z",
            "2024-01-01T05:00:00Z"
        ])
    );
    assert_eq!(two.missed, 2);
    let all = plan(&s, cursor, now, G, Missed::CatchUp(100));
    assert_eq!(all.fires.len(), 5);
    assert_eq!(all.missed, 0);
    for p in [&skip, &latest, &two, &all] {
        assert_eq!(p.cursor, Some(t("2024-01-01T05:00:00Z")));
        assert_eq!(p.next, Some(t("2024-01-01T06:00:00Z")));
    }

    // Only missed fires (none on time): the cursor still moves to the latest of them, so
    // that the dropped ones are not looked at again.
    let now = t("2024-01-01T04:30:00Z");
    let skip = plan(&s, cursor, now, G, Missed::Skip);
    assert!(skip.fires.is_empty());
    assert_eq!(skip.missed, 4);
    assert_eq!(skip.cursor, Some(t("2024-01-01T04:00:00Z")));
    let latest = plan(&s, cursor, now, G, Missed::Latest);
    assert_eq!(latest.fires, ts(&["2024-01-01T04:00:00Z"]));
    assert_eq!(latest.cursor, Some(t("2024-01-01T04:00:00Z")));
}

#[test]
fn a_long_outage_is_counted_up_to_a_cap() {
    let s = spec("* * * * * *", "UTC");
    let p = plan(
        &s,
        t("2024-01-01T00:00:00Z"),
        t("2024-01-02T00:00:00Z"),
        G,
        Missed::Latest,
    );
    // The 11 on-time fires (23:59:50 to 00:00:00, each at most 10 s old) and the latest
    // missed one.
    assert_eq!(p.fires.len(), 12);
    assert_eq!(p.fires[0], t("2024-01-01T23:59:49Z"));
    assert_eq!(p.missed, schedule::MISSED_COUNT_CAP - 1);
    assert_eq!(p.cursor, Some(t("2024-01-02T00:00:00Z")));
}

/// Europe/Berlin springs forward on 2024-03-31 (02:00 CET becomes 03:00 CEST): 02:30 does
/// not exist that day, and a daily 02:30 fires at the first instant after the change.
#[test]
fn spring_forward_fires_a_skipped_time_once_after_the_change() {
    let s = spec("30 2 * * *", "Europe/Berlin");
    let p = plan(
        &s,
        t("2024-03-30T12:00:00Z"),
        t("2024-04-01T12:00:00Z"),
        Duration::from_secs(3600),
        Missed::CatchUp(10),
    );
    assert_eq!(
        p.fires,
        ts(&[
            // 02:30 CET on the 30th... is on the 31st: 03:00 CEST, the gap's end.
            "2024-03-31T01:00:00Z",
            // 02:30 CEST on April 1st.
            "2024-04-01T00:30:00Z",
        ])
    );
    assert_eq!(p.next, Some(t("2024-04-02T00:30:00Z")));
}

/// Europe/Berlin falls back on 2024-10-27 (03:00 CEST becomes 02:00 CET): 02:00 to 03:00
/// happens twice. A daily 02:30 fires once; a half-hourly schedule fires in both halves.
#[test]
fn fall_back_fires_a_daily_time_once_and_intervals_in_both_halves() {
    let daily = spec("30 2 * * *", "Europe/Berlin");
    let p = plan(
        &daily,
        t("2024-10-26T12:00:00Z"),
        t("2024-10-27T12:00:00Z"),
        Duration::from_secs(3600),
        Missed::CatchUp(10),
    );
    assert_eq!(p.fires, ts(&["2024-10-27T00:30:00Z"]));

    let half_hourly = spec("*/30 * * * *", "Europe/Berlin");
    let p = plan(
        &half_hourly,
        t("2024-10-26T23:45:00Z"),
        t("2024-10-27T01:45:00Z"),
        Duration::from_secs(3600),
        Missed::CatchUp(10),
    );
    assert_eq!(
        p.fires,
        ts(&[
            "2024-10-27T00:00:00Z", // 02:00 CEST
            "2024-10-27T00:30:00Z", // 02:30 CEST
            "2024-10-27T01:00:00Z", // 02:00 CET
            "2024-10-27T01:30:00Z", // 02:30 CET
        ])
    );
    assert_eq!(p.missed, 0);
}

#[test]
fn the_scheduler_settings_are_checked() {
    SchedulerConfig::default().check().unwrap();
    for cfg in [
        SchedulerConfig::default().tick(Duration::ZERO),
        SchedulerConfig::default().tick(Duration::from_secs(61)),
        SchedulerConfig::default().grace(Duration::ZERO),
        SchedulerConfig::default().grace(Duration::from_secs(3601)),
        SchedulerConfig::default()
            .tick(Duration::from_secs(10))
            .grace(Duration::from_secs(10)),
    ] {
        assert!(cfg.check().unwrap_err().is_invalid_input(), "{cfg:?}");
    }
}
