//! Cron schedules in UTC, as Karpenter reads a disruption budget's `schedule`: five fields
//! (minute, hour, day of month, month, day of week) or one of the macros `@yearly`
//! (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and `@hourly`.
//!
//! A field is a comma-separated list of parts; a part is `*` (or `?`), a value, a range `a-b`,
//! each optionally with a step `/n`, and `a/n` means `a-<max>/n`. Months and days of the week
//! may be named (`JAN`, `mon`); days of the week run 0 (Sunday) to 6. When both the day of
//! month and the day of week are restricted, a day matching either fires (classic cron); when
//! one of them is `*` (unstepped), the other alone decides. These are the rules of the parser
//! Karpenter uses (`robfig/cron`'s standard parser), so a schedule fires here exactly when it
//! fires there.
//!
//! A schedule is parsed once into bit sets; [`Cron::last_fire`] walks back day by day over a
//! bounded window, so no input makes it loop without end, and no input panics: times are
//! plain `i64` seconds since the Unix epoch, with day arithmetic done on Euclidean division.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::CronError;

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// A parsed cron schedule (UTC). Compares, prints and serializes as the text it was parsed from.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cron {
    text: String,
    /// Bit `m` set: fires at minute `m` (0..=59).
    minutes: u64,
    /// Bit `h`: hour `h` (0..=23).
    hours: u64,
    /// Bit `d`: day of month `d` (1..=31).
    days_of_month: u64,
    /// Bit `m`: month `m` (1..=12).
    months: u64,
    /// Bit `d`: day of week `d` (0 = Sunday ..= 6).
    days_of_week: u64,
    /// Whether the day-of-month field is an unstepped `*`, which makes the day of week alone
    /// decide (and the other way round).
    dom_any: bool,
    /// Whether the day-of-week field is an unstepped `*`.
    dow_any: bool,
}

/// One field's bounds and names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The value of the first name (`jan` is 1, `sun` is 0).
    first_named: u32,
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
        first_named: 0,
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
        first_named: 0,
    },
    Field {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
        first_named: 0,
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &MONTHS,
        first_named: 1,
    },
    Field {
        name: "day-of-week",
        min: 0,
        max: 6,
        names: &WEEKDAYS,
        first_named: 0,
    },
];

impl Cron {
    /// Parses `text` as the module describes.
    ///
    /// # Errors
    /// [`CronError`] naming `text` and, for a bad field, the field and what is wrong with it:
    /// not five fields, an unknown macro, a value out of the field's range, a range whose
    /// start is after its end, or a step that is not a positive number.
    pub fn parse(text: &str) -> Result<Cron, CronError> {
        let err = |why: String| CronError {
            input: text.to_string(),
            why,
        };
        // ASCII whitespace only, the `\s` of the CRD's pattern (RE2), so the API server and
        // this parser split a schedule alike.
        let trimmed = text.trim_matches(|c: char| c.is_ascii_whitespace());
        let expanded = if let Some(name) = trimmed.strip_prefix('@') {
            match name {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => {
                    return Err(err(format!(
                        "unknown macro {trimmed:?} (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"
                    )));
                }
            }
        } else {
            trimmed
        };
        let fields: Vec<&str> = expanded.split_ascii_whitespace().collect();
        if fields.len() != 5 {
            return Err(err(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            )));
        }
        let mut bits = [0u64; 5];
        let mut any = [false; 5];
        for (i, (f, spec)) in FIELDS.iter().zip(&fields).enumerate() {
            let (b, a) = parse_field(f, spec)
                .map_err(|why| err(format!("{} field {spec:?}: {why}", f.name)))?;
            bits[i] = b;
            any[i] = a;
        }
        Ok(Cron {
            text: text.to_string(),
            minutes: bits[0],
            hours: bits[1],
            days_of_month: bits[2],
            months: bits[3],
            days_of_week: bits[4],
            dom_any: any[2],
            dow_any: any[4],
        })
    }

    /// The text the schedule was parsed from.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The latest time the schedule fires at or before `now` and at or after `not_before`
    /// (seconds since the Unix epoch, UTC; a schedule fires at second 0 of its minutes).
    /// `None` when it does not fire in that window. The walk is one step per day of the
    /// window, so callers bound the window (a budget's duration is at most ten years).
    pub fn last_fire(&self, now: i64, not_before: i64) -> Option<i64> {
        if not_before > now {
            return None;
        }
        let first_day = not_before.div_euclid(DAY);
        let mut day = now.div_euclid(DAY);
        // On the first day only minutes up to `now` count; on earlier days, the whole day.
        let mut latest_minute = now.rem_euclid(DAY) / 60;
        while day >= first_day {
            if self.fires_on(day)
                && let Some(m) = self.last_minute_of_day(latest_minute)
            {
                let t = day.checked_mul(DAY)?.checked_add(m * 60)?;
                return (t >= not_before).then_some(t);
            }
            day -= 1;
            latest_minute = 24 * 60 - 1;
        }
        None
    }

    /// Whether the schedule's day fields and month let it fire on `day` (days since the
    /// epoch).
    fn fires_on(&self, day: i64) -> bool {
        let (_, month, dom) = civil_from_days(day);
        let dow = (day + 4).rem_euclid(7); // 1970-01-01 was a Thursday.
        if self.months & (1 << month) == 0 {
            return false;
        }
        let dom_ok = self.days_of_month & (1 << dom) != 0;
        let dow_ok = self.days_of_week & (1 << dow) != 0;
        if self.dom_any || self.dow_any {
            dom_ok && dow_ok
        } else {
            dom_ok || dow_ok
        }
    }

    /// The latest minute of a firing day (minutes since midnight) at or before `latest`.
    fn last_minute_of_day(&self, latest: i64) -> Option<i64> {
        let hour_max = latest / 60;
        (0..=hour_max).rev().find_map(|h| {
            if self.hours & (1 << h) == 0 {
                return None;
            }
            let minute_max = if h == hour_max { latest % 60 } else { 59 };
            (0..=minute_max)
                .rev()
                .find(|m| self.minutes & (1 << m) != 0)
                .map(|m| h * 60 + m)
        })
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cron({:?})", self.text)
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl TryFrom<String> for Cron {
    type Error = CronError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Cron::parse(&text)
    }
}

impl From<Cron> for String {
    fn from(c: Cron) -> String {
        c.text
    }
}

const DAY: i64 = 86_400;

/// Parses one field into its bit set and whether it is an unstepped `*`.
fn parse_field(f: &Field, spec: &str) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut any = false;
    for part in spec.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step = s
                    .parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step {s:?} is not a positive number"))?;
                (r, Some(step))
            }
            None => (part, None),
        };
        let (start, end) = if range == "*" || range == "?" {
            // An unstepped (or `/1`) star stays "any" for the day-of-month/day-of-week rule.
            any |= step.is_none_or(|s| s == 1);
            (f.min, f.max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(f, a)?, value(f, b)?);
            if a > b {
                return Err(format!("range {range:?} starts after it ends"));
            }
            (a, b)
        } else {
            let a = value(f, range)?;
            // `a/n` runs from `a` to the field's end.
            (a, if step.is_some() { f.max } else { a })
        };
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v = match v.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    Ok((bits, any))
}

/// One value of a field: a number within its bounds or one of its names.
fn value(f: &Field, text: &str) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = f.names.iter().position(|n| *n == lower) {
        return Ok(f.first_named + i as u32);
    }
    let v: u32 = text
        .parse()
        .ok()
        .filter(|_| text.bytes().all(|c| c.is_ascii_digit()))
        .ok_or_else(|| format!("{text:?} is not a number"))?;
    if v < f.min || v > f.max {
        return Err(format!("{v} is outside {}..={}", f.min, f.max));
    }
    Ok(v)
}

/// (year, month 1..=12, day 1..=31) of `days` since 1970-01-01, in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`). Exact for every `i64` day count whose year
/// fits in `i64`, which `i64` seconds divided by a day always does.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests;
