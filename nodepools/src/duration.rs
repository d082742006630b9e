//! Durations as NodePools spell them: `30s`, `10m`, `1h`, `1h30m`, and `Never` where allowed.

/// The OpenAPI pattern of a duration that may not be `Never`.
pub const DURATION_PATTERN: &str = "^([0-9]+(s|m|h))+$";

/// The OpenAPI pattern of a duration that may be `Never`.
pub const DURATION_OR_NEVER_PATTERN: &str = "^(([0-9]+(s|m|h))+|Never)$";

/// A parsed duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duration {
    /// This many seconds.
    Seconds(i64),
    /// `Never`: the action the duration delays is disabled.
    Never,
}

/// Parses `<digits><unit>` groups (units `s`, `m`, `h`, summed), or `Never` when `allow_never`.
///
/// # Errors
/// A short reason when the text has another form or overflows 64-bit seconds.
pub fn parse(text: &str, allow_never: bool) -> Result<Duration, String> {
    let expected = if allow_never {
        "expected e.g. 30s, 10m, 1h30m or Never"
    } else {
        "expected e.g. 30s, 10m or 1h30m"
    };
    let bad = || format!("invalid duration {text:?} ({expected})");
    if text == "Never" {
        return if allow_never {
            Ok(Duration::Never)
        } else {
            Err(bad())
        };
    }
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: i64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits_end = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits_end == 0 {
            return Err(bad());
        }
        let (digits, after) = rest.split_at(digits_end);
        let mut chars = after.chars();
        let unit: i64 = match chars.next() {
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3600,
            _ => return Err(bad()),
        };
        let too_large = || format!("duration {text:?} is too large");
        let n: i64 = digits.parse().map_err(|_| too_large())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(too_large)?;
        rest = chars.as_str();
    }
    Ok(Duration::Seconds(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!(parse("30s", false), Ok(Duration::Seconds(30)));
        assert_eq!(parse("10m", false), Ok(Duration::Seconds(600)));
        assert_eq!(parse("1h30m5s", false), Ok(Duration::Seconds(5405)));
        assert_eq!(parse("0s", false), Ok(Duration::Seconds(0)));
        assert_eq!(parse("Never", true), Ok(Duration::Never));
    }

    #[test]
    fn rejects_everything_else_without_panicking() {
        for text in [
            "", "10", "m", "10 m", "1d", "-5s", "1.5h", "Never", "never", "5s ", "h1", "10mm",
        ] {
            let e = parse(text, false).unwrap_err();
            assert!(e.contains(&format!("{text:?}")), "{e}");
        }
        assert_eq!(
            parse("99999999999999999999h", true).unwrap_err(),
            "duration \"99999999999999999999h\" is too large"
        );
        assert_eq!(
            parse("9223372036854775807h", true).unwrap_err(),
            "duration \"9223372036854775807h\" is too large"
        );
        assert!(parse("é", true).is_err());
    }
}
