//! Tables of schedules: when a budget window is open, what each bad schedule is told, and that
//! no text or time panics.

use proptest::prelude::*;

use super::*;
use crate::model::{Budget, BudgetSchedule, BudgetValue};

/// Seconds since the epoch of `y-m-d h:min` UTC (Hinnant's `days_from_civil`).
fn at(y: i64, m: i64, d: i64, h: i64, min: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * DAY + h * 3600 + min * 60
}

fn budget(schedule: &str, duration_s: i64) -> Budget {
    Budget {
        nodes: BudgetValue::Count(0),
        reasons: vec![],
        schedule: Some(BudgetSchedule {
            cron: Cron::parse(schedule).unwrap(),
            duration_s,
        }),
    }
}

const H: i64 = 3600;
const M: i64 = 60;

#[test]
fn calendar_round_trips() {
    for (y, m, d, dow) in [
        (1970, 1, 1, 4),
        (2000, 2, 29, 2),
        (2024, 1, 1, 1),
        (2024, 3, 4, 1),
        (2024, 3, 10, 0),
        (1969, 12, 31, 3),
    ] {
        let day = at(y, m, d, 0, 0).div_euclid(DAY);
        assert_eq!(civil_from_days(day), (y, m, d));
        assert_eq!((day + 4).rem_euclid(7), dow, "{y}-{m}-{d}");
    }
}

/// (schedule, window, now, active). 2024-03-04 is a Monday, 2024-03-10 a Sunday.
#[test]
fn budget_windows() {
    let cases: &[(&str, i64, i64, bool)] = &[
        // Crossing midnight: 22:00 for 8h is open until 06:00 the next day, exclusive.
        ("0 22 * * *", 8 * H, at(2024, 3, 4, 21, 59), false),
        ("0 22 * * *", 8 * H, at(2024, 3, 4, 22, 0), true),
        ("0 22 * * *", 8 * H, at(2024, 3, 4, 23, 30), true),
        ("0 22 * * *", 8 * H, at(2024, 3, 5, 5, 59), true),
        ("0 22 * * *", 8 * H, at(2024, 3, 5, 6, 0), false),
        // Across a month and a year end.
        ("0 22 * * *", 8 * H, at(2024, 1, 1, 1, 0), true),
        // Macros.
        ("@daily", H, at(2024, 3, 4, 0, 0), true),
        ("@daily", H, at(2024, 3, 4, 0, 59) + 59, true),
        ("@daily", H, at(2024, 3, 4, 1, 0), false),
        ("@midnight", H, at(2024, 3, 4, 0, 30), true),
        ("@hourly", 10 * M, at(2024, 3, 4, 12, 5), true),
        ("@hourly", 10 * M, at(2024, 3, 4, 12, 10), false),
        ("@weekly", 48 * H, at(2024, 3, 11, 23, 59), true),
        ("@weekly", 48 * H, at(2024, 3, 12, 0, 0), false),
        ("@weekly", 48 * H, at(2024, 3, 9, 23, 59), false),
        ("@monthly", 24 * H, at(2024, 3, 1, 12, 0), true),
        ("@monthly", 24 * H, at(2024, 3, 2, 12, 0), false),
        ("@yearly", 24 * H, at(2025, 1, 1, 23, 0), true),
        ("@annually", 24 * H, at(2025, 1, 2, 0, 0), false),
        // Business hours on weekdays, by range and by name.
        ("0 9 * * 1-5", 8 * H, at(2024, 3, 4, 10, 0), true),
        ("0 9 * * 1-5", 8 * H, at(2024, 3, 8, 16, 59), true),
        ("0 9 * * 1-5", 8 * H, at(2024, 3, 8, 17, 0), false),
        ("0 9 * * 1-5", 8 * H, at(2024, 3, 4, 8, 59), false),
        ("0 9 * * 1-5", 8 * H, at(2024, 3, 9, 10, 0), false),
        ("0 9 * * MON-FRI", 8 * H, at(2024, 3, 5, 12, 0), true),
        ("0 9 * * mon-fri", 8 * H, at(2024, 3, 10, 12, 0), false),
        ("0 9 * * sat,sun", 8 * H, at(2024, 3, 10, 12, 0), true),
        // Day of month and day of week both restricted: either day fires (the 13th, a
        // Wednesday, and Friday the 8th), neither does not.
        ("0 0 13 * 5", 24 * H, at(2024, 3, 13, 12, 0), true),
        ("0 0 13 * 5", 24 * H, at(2024, 3, 8, 12, 0), true),
        ("0 0 13 * 5", 24 * H, at(2024, 3, 12, 12, 0), false),
        // One of them `*`: the other alone decides.
        ("0 0 13 * *", 24 * H, at(2024, 3, 8, 12, 0), false),
        ("0 0 * * 5", 24 * H, at(2024, 3, 13, 12, 0), false),
        // A stepped star is a restriction (robfig/cron): days 1, 11, 21, 31 or a Friday.
        ("0 0 */10 * 5", 24 * H, at(2024, 3, 8, 12, 0), true),
        ("0 0 */10 * 5", 24 * H, at(2024, 3, 11, 12, 0), true),
        ("0 0 */10 * 5", 24 * H, at(2024, 3, 12, 12, 0), false),
        // Steps, lists, `a/n`.
        ("*/15 * * * *", 5 * M, at(2024, 3, 4, 10, 14), false),
        ("*/15 * * * *", 5 * M, at(2024, 3, 4, 10, 16), true),
        ("5/20 * * * *", M, at(2024, 3, 4, 10, 45), true),
        ("5/20 * * * *", M, at(2024, 3, 4, 10, 40), false),
        ("0 8,20 * * *", H, at(2024, 3, 4, 20, 30), true),
        ("0 8,20 * * *", H, at(2024, 3, 4, 14, 0), false),
        ("0 1-3/2 * * *", 30 * M, at(2024, 3, 4, 3, 10), true),
        ("0 1-3/2 * * *", 30 * M, at(2024, 3, 4, 2, 10), false),
        // Months, leap days and days a month lacks.
        ("30 1 29 2 *", H, at(2024, 2, 29, 1, 45), true),
        ("30 1 29 2 *", H, at(2023, 3, 1, 1, 45), false),
        ("0 0 1 jan *", H, at(2024, 1, 1, 0, 0), true),
        ("0 0 31 * *", H, at(2024, 3, 31, 0, 30), true),
        ("0 0 31 * *", 24 * 40 * H, at(2024, 5, 1, 0, 30), true),
        ("0 0 31 * *", 24 * 30 * H, at(2024, 5, 1, 0, 30), false),
        // A window that never fires, and an empty window.
        ("0 0 30 2 *", 24 * 365 * H, at(2024, 3, 4, 0, 0), false),
        ("* * * * *", 0, at(2024, 3, 4, 0, 0), false),
        ("* * * * *", 1, at(2024, 3, 4, 0, 0), true),
        ("* * * * *", 1, at(2024, 3, 4, 0, 0) + 1, false),
        // Before the epoch.
        ("@daily", H, at(1969, 12, 31, 0, 30), true),
    ];
    for (schedule, window, now, active) in cases {
        assert_eq!(
            budget(schedule, *window).active_at(*now),
            *active,
            "{schedule:?} for {window}s at {now}"
        );
    }
    let always = Budget {
        schedule: None,
        ..budget("@daily", H)
    };
    assert!(always.active_at(at(2024, 3, 4, 12, 0)));
}

#[test]
fn last_fire_is_the_latest_in_the_window() {
    let c = Cron::parse("0 9 * * 1-5").unwrap();
    let now = at(2024, 3, 11, 8, 0); // Monday before 9:00
    assert_eq!(
        c.last_fire(now, now - 7 * 24 * H),
        Some(at(2024, 3, 8, 9, 0))
    );
    assert_eq!(c.last_fire(now, at(2024, 3, 8, 9, 1)), None);
    assert_eq!(c.last_fire(now, now + 1), None);
}

#[test]
fn bad_schedules_say_which_field_and_why() {
    let cases = [
        (
            "",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 0",
        ),
        (
            "0 9 * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 4",
        ),
        ("0 9 * * * *", "found 6"),
        ("60 * * * *", r#"minute field "60": 60 is outside 0..=59"#),
        ("0 24 * * *", r#"hour field "24": 24 is outside 0..=23"#),
        (
            "0 0 0 * *",
            r#"day-of-month field "0": 0 is outside 1..=31"#,
        ),
        ("0 0 * 13 *", r#"month field "13": 13 is outside 1..=12"#),
        ("0 0 * * 7", r#"day-of-week field "7": 7 is outside 0..=6"#),
        (
            "*/0 * * * *",
            r#"minute field "*/0": step "0" is not a positive number"#,
        ),
        ("*/x * * * *", r#"step "x" is not a positive number"#),
        (
            "0 0 * * 5-1",
            r#"day-of-week field "5-1": range "5-1" starts after it ends"#,
        ),
        ("a * * * *", r#"minute field "a": "a" is not a number"#),
        ("1,,2 * * * *", r#""" is not a number"#),
        ("+1 * * * *", r#""+1" is not a number"#),
        ("99999999999 * * * *", "is not a number"),
        ("0 0 * foo *", r#""foo" is not a number"#),
        ("@every 1h", "unknown macro"),
        ("@often", "unknown macro"),
    ];
    for (text, why) in cases {
        let e = Cron::parse(text).unwrap_err();
        assert!(e.to_string().contains(why), "{text:?}: {e}");
        assert!(
            e.to_string()
                .starts_with(&format!("invalid schedule {text:?}: "))
        );
    }
}

#[test]
fn serializes_as_its_text() {
    let c = Cron::parse("0 9 * * mon-fri").unwrap();
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(json, r#""0 9 * * mon-fri""#);
    assert_eq!(serde_json::from_str::<Cron>(&json).unwrap(), c);
    assert!(serde_json::from_str::<Cron>(r#""0 9 * *""#).is_err());
}

proptest! {
    /// Any text parses or is refused, and any time and window answer, without a panic.
    #[test]
    fn never_panics(text in "[0-9*/,?a-zA-Z@ -]{0,30}", now: i64, window in 0i64..=315_576_000) {
        if let Ok(c) = Cron::parse(&text) {
            let b = Budget {
                nodes: BudgetValue::Count(0),
                reasons: vec![],
                schedule: Some(BudgetSchedule { cron: c, duration_s: window }),
            };
            let _ = b.active_at(now);
        }
    }

    /// Extreme times with an every-minute schedule.
    #[test]
    fn extreme_times(now in prop_oneof![Just(i64::MIN), Just(i64::MAX), any::<i64>()]) {
        let b = budget("* * * * *", 120);
        let _ = b.active_at(now);
    }
}
