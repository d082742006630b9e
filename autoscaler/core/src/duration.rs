//! Durations as users write them: one grammar for the controller's flags, NodePools and
//! scenario files, bounded to ten years.
//!
//! A duration is one or more `<number><unit>` groups, summed: `90s`, `1h30m`, `1.5h`, `250ms`,
//! `2d`. A number is decimal digits with an optional fraction (`1.5`, never `1e3`, `inf` or
//! `.5`); units are `ms`, `s`, `m`, `h` and `d`. Where a place took a bare number of seconds
//! before (flags, scenario files), [`Bare::Seconds`] keeps it; NodePools, whose schema has
//! always required a unit, pass [`Bare::Refused`]. The arithmetic is exact integer nanoseconds,
//! checked at every step, so no input wraps, saturates or panics; anything longer than
//! [`MAX_DURATION`] is refused.

use std::time::Duration;

use crate::error::{DurationError, DurationProblem};

/// The longest duration accepted anywhere: ten years of 365.25 days.
pub const MAX_DURATION: Duration = Duration::from_secs(315_576_000);

/// What a bare number without a unit means to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bare {
    /// A bare number is that many seconds (`90`, `1.5`).
    Seconds,
    /// A unit is required (NodePools).
    Refused,
}

/// The OpenAPI pattern of the text [`parse`] accepts with [`Bare::Refused`], apart from the
/// ten-year bound (which a pattern cannot express; validation reports it).
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$";

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Parses `text` as the grammar of this module describes.
///
/// # Errors
/// [`DurationError`] naming `text`: empty, negative, malformed, or longer than
/// [`MAX_DURATION`]. The message for a malformed text is the same in every place that parses
/// durations.
pub fn parse(text: &str, bare: Bare) -> Result<Duration, DurationError> {
    let err = |why| DurationError {
        input: text.to_string(),
        why,
    };
    if text.is_empty() {
        return Err(err(DurationProblem::Empty));
    }
    if text.starts_with('-') {
        return Err(err(DurationProblem::Negative));
    }
    let mut total: u128 = 0;
    let mut rest = text;
    let mut first = true;
    while !rest.is_empty() {
        let (int, frac, after) = split_number(rest).ok_or_else(|| err(DurationProblem::Syntax))?;
        let (unit_nanos, after) = if after.is_empty() && first && bare == Bare::Seconds {
            (NANOS_PER_SEC, after)
        } else if let Some(after) = after.strip_prefix("ms") {
            (NANOS_PER_SEC / 1000, after)
        } else {
            let mut chars = after.chars();
            let unit = match chars.next() {
                Some('s') => 1,
                Some('m') => 60,
                Some('h') => 3600,
                Some('d') => 86_400,
                _ => return Err(err(DurationProblem::Syntax)),
            };
            (unit * NANOS_PER_SEC, chars.as_str())
        };
        total = group_nanos(int, frac, unit_nanos)
            .and_then(|g| total.checked_add(g))
            .filter(|t| *t <= MAX_DURATION.as_nanos())
            .ok_or_else(|| err(DurationProblem::TooLong))?;
        rest = after;
        first = false;
    }
    // At most ten years in nanoseconds, far below u64 seconds.
    let secs = u64::try_from(total / NANOS_PER_SEC).map_err(|_| err(DurationProblem::TooLong))?;
    let nanos = u32::try_from(total % NANOS_PER_SEC).map_err(|_| err(DurationProblem::TooLong))?;
    Ok(Duration::new(secs, nanos))
}

/// A number of seconds given as a YAML or JSON number, held to the same rules as text.
///
/// # Errors
/// [`DurationError`] naming the value when it is not finite, negative, or longer than
/// [`MAX_DURATION`].
pub fn from_secs_f64(secs: f64) -> Result<Duration, DurationError> {
    let err = |why| DurationError {
        input: secs.to_string(),
        why,
    };
    if secs.is_nan() {
        return Err(err(DurationProblem::Syntax));
    }
    if secs < 0.0 {
        return Err(err(DurationProblem::Negative));
    }
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| *d <= MAX_DURATION)
        .ok_or_else(|| err(DurationProblem::TooLong))
}

/// Whole seconds of a duration accepted by this module, rounded to the nearest second (half
/// up), as scenario files and NodePools count time.
pub fn whole_seconds(d: Duration) -> i64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() >= 500_000_000);
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// `secs` as this grammar writes it, in hours, minutes and seconds with the zero ones left
/// out, as Karpenter's durations read (`720h`, `1h30m`, `2m5s`; `0s` for nothing): the text
/// every message that states a duration uses. [`parse`] reads it back to `secs`. A negative
/// span (a clock that went back) gets a leading `-`.
pub fn format(secs: i64) -> String {
    use std::fmt::Write;
    let sign = if secs < 0 { "-" } else { "" };
    let s = secs.unsigned_abs();
    let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
    let mut out = sign.to_string();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if m > 0 {
        let _ = write!(out, "{m}m");
    }
    if sec > 0 || (h == 0 && m == 0) {
        let _ = write!(out, "{sec}s");
    }
    out
}

/// Whole seconds of a default written in this grammar (the flags' default texts, which the
/// core's `Default` impls read so that both agree by construction). Such texts are constants
/// the tests parse, never user input; one that failed to parse would count as 0.
pub fn default_seconds(text: &str) -> i64 {
    parse(text, Bare::Seconds).map_or(0, whole_seconds)
}

/// Splits a leading `digits[.digits]` off `text`: (integer digits, fraction digits, rest).
fn split_number(text: &str) -> Option<(&str, &str, &str)> {
    let int_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if int_end == 0 {
        return None;
    }
    let (int, rest) = text.split_at(int_end);
    let Some(after_dot) = rest.strip_prefix('.') else {
        return Some((int, "", rest));
    };
    let frac_end = after_dot
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after_dot.len());
    if frac_end == 0 {
        return None;
    }
    let (frac, rest) = after_dot.split_at(frac_end);
    Some((int, frac, rest))
}

/// `int.frac` units of `unit_nanos` nanoseconds, or `None` when it does not fit (the caller
/// reports that as too long). Fraction digits past the 18th are below a nanosecond of any
/// unit here and are ignored.
fn group_nanos(int: &str, frac: &str, unit_nanos: u128) -> Option<u128> {
    let int = int.trim_start_matches('0');
    // 30 digits already exceed ten years in any unit; refusing longer text keeps the parse
    // of the integer from overflowing.
    if int.len() > 30 {
        return None;
    }
    let whole = if int.is_empty() {
        0
    } else {
        int.parse::<u128>().ok()?
    };
    let frac = &frac[..frac.len().min(18)];
    let frac_nanos = if frac.is_empty() {
        0
    } else {
        // < 10^18 × 8.64·10^13 < 2^128.
        let digits: u128 = frac.parse().ok()?;
        digits * unit_nanos / 10u128.pow(frac.len() as u32)
    };
    whole.checked_mul(unit_nanos)?.checked_add(frac_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str, bare: Bare) -> Result<f64, String> {
        parse(text, bare)
            .map(|d| d.as_secs_f64())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn accepts_the_same_forms_everywhere() {
        for bare in [Bare::Seconds, Bare::Refused] {
            assert_eq!(secs("90s", bare), Ok(90.0));
            assert_eq!(secs("1h30m", bare), Ok(5400.0));
            assert_eq!(secs("1.5h", bare), Ok(5400.0));
            assert_eq!(secs("250ms", bare), Ok(0.25));
            assert_eq!(secs("1m30s", bare), Ok(90.0));
            assert_eq!(secs("2d", bare), Ok(172_800.0));
            assert_eq!(secs("0s", bare), Ok(0.0));
            assert_eq!(secs("1h1ms", bare), Ok(3600.001));
            assert_eq!(secs("3652d", bare), Ok(315_532_800.0));
        }
        assert_eq!(secs("90", Bare::Seconds), Ok(90.0));
        assert_eq!(secs("1.5", Bare::Seconds), Ok(1.5));
    }

    #[test]
    fn refuses_with_one_message_naming_the_text() {
        for bare in [Bare::Seconds, Bare::Refused] {
            for text in [
                "x", "1e3", "inf", "NaN", ".5s", "1.s", "5 s", " 5s", "5s ", "1w", "h1", "10mm",
                "1h30", "s", "1..5s", "+5s", "٣s",
            ] {
                let e = parse(text, bare).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    format!(
                        "invalid duration {text:?}: expected a number with a unit, e.g. 90s, \
                         1h30m or 1.5h (units ms, s, m, h, d)"
                    )
                );
            }
            assert_eq!(
                parse("-5s", bare).unwrap_err().to_string(),
                "invalid duration \"-5s\": negative duration"
            );
            assert_eq!(parse("", bare).unwrap_err().why, DurationProblem::Empty);
        }
        assert_eq!(
            parse("90", Bare::Refused).unwrap_err().why,
            DurationProblem::Syntax
        );
    }

    #[test]
    fn bounds_to_ten_years_without_overflow() {
        for text in [
            "99999999999999999h",
            "100000000d",
            "3653d",
            "315576001s",
            "87660h1s",
            "9223372036854775807h",
            "340282366920938463463374607431768211456s",
            "99999999999999999999999999999999999999999999999999d",
            "1e400",
        ] {
            let why = parse(text, Bare::Seconds).unwrap_err().why;
            assert!(
                why == DurationProblem::TooLong || text == "1e400",
                "{text}: {why:?}"
            );
        }
        assert_eq!(parse("87660h", Bare::Refused), Ok(MAX_DURATION));
        assert_eq!(
            parse("315576000", Bare::Seconds),
            Ok(Duration::from_secs(315_576_000))
        );
    }

    #[test]
    fn numbers_follow_the_same_rules() {
        assert_eq!(from_secs_f64(1.5), Ok(Duration::from_millis(1500)));
        for (v, why) in [
            (f64::NAN, DurationProblem::Syntax),
            (f64::INFINITY, DurationProblem::TooLong),
            (-1.0, DurationProblem::Negative),
            (f64::NEG_INFINITY, DurationProblem::Negative),
            (1e23, DurationProblem::TooLong),
            (1e300, DurationProblem::TooLong),
        ] {
            assert_eq!(from_secs_f64(v).unwrap_err().why, why, "{v}");
        }
    }

    #[test]
    fn format_writes_hours_minutes_and_seconds_that_parse_back() {
        for (secs, text) in [
            (0, "0s"),
            (45, "45s"),
            (60, "1m"),
            (125, "2m5s"),
            (3600, "1h"),
            (5400, "1h30m"),
            (3601, "1h1s"),
            (9000, "2h30m"),
            (2_592_000, "720h"),
            (-90, "-1m30s"),
            (i64::MIN, "-2562047788015215h30m8s"),
        ] {
            assert_eq!(format(secs), text, "{secs}");
        }
        for secs in (0..100_000).step_by(37) {
            let back = parse(&format(secs), Bare::Refused).map(whole_seconds);
            assert_eq!(back, Ok(secs), "{secs}");
        }
    }

    #[test]
    fn whole_seconds_round_half_up() {
        assert_eq!(whole_seconds(Duration::from_millis(1499)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(MAX_DURATION), 315_576_000);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_stays_bounded(s in "[0-9.smhd-]{0,24}") {
            if let Ok(d) = parse(&s, Bare::Seconds) {
                proptest::prop_assert!(d <= MAX_DURATION);
            }
        }

        #[test]
        fn whole_seconds_round_trip(n in 0u64..=315_576_000) {
            proptest::prop_assert_eq!(parse(&format!("{n}s"), Bare::Refused), Ok(Duration::from_secs(n)));
            proptest::prop_assert_eq!(parse(&n.to_string(), Bare::Seconds), Ok(Duration::from_secs(n)));
        }
    }
}
