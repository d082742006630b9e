//! Durations as NodePools spell them: the core's grammar (`30s`, `1h30m`, `1.5h`), and `Never`
//! where allowed.

use autoscaler_core::duration::{self as grammar, Bare};

/// The OpenAPI pattern of a duration that may not be `Never` (the core's grammar, without a
/// bare number of seconds).
pub const DURATION_PATTERN: &str = grammar::DURATION_PATTERN;

/// The OpenAPI pattern of a duration that may be `Never`.
pub const DURATION_OR_NEVER_PATTERN: &str = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+|Never)$";

/// A parsed duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duration {
    /// This many seconds (rounded to the nearest second).
    Seconds(i64),
    /// `Never`: the action the duration delays is disabled.
    Never,
}

/// Parses a duration in the core's grammar ([`autoscaler_core::duration`]: `30s`, `1h30m`,
/// `1.5h`, `250ms`, `2d`; a unit is required), or `Never` when `allow_never`.
///
/// # Errors
/// The core's message naming the text when it has another form, is negative or longer than
/// ten years; `Never` where it is not allowed gets the same message as any malformed text.
pub fn parse(text: &str, allow_never: bool) -> Result<Duration, String> {
    if text == "Never" && allow_never {
        return Ok(Duration::Never);
    }
    grammar::parse(text, Bare::Refused)
        .map(|d| Duration::Seconds(grammar::whole_seconds(d)))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!(parse("30s", false), Ok(Duration::Seconds(30)));
        assert_eq!(parse("10m", false), Ok(Duration::Seconds(600)));
        assert_eq!(parse("1h30m5s", false), Ok(Duration::Seconds(5405)));
        assert_eq!(parse("1.5h", false), Ok(Duration::Seconds(5400)));
        assert_eq!(parse("1d", false), Ok(Duration::Seconds(86_400)));
        assert_eq!(parse("1500ms", false), Ok(Duration::Seconds(2)));
        assert_eq!(parse("0s", false), Ok(Duration::Seconds(0)));
        assert_eq!(parse("Never", true), Ok(Duration::Never));
    }

    #[test]
    fn rejects_everything_else_without_panicking() {
        for text in [
            "", "10", "m", "10 m", "1w", "-5s", "1.5", "Never", "never", "5s ", "h1", "10mm",
        ] {
            let e = parse(text, false).unwrap_err();
            assert!(e.contains(&format!("{text:?}")), "{e}");
        }
        assert_eq!(
            parse("99999999999999999999h", true).unwrap_err(),
            "invalid duration \"99999999999999999999h\": longer than 10 years"
        );
        assert_eq!(
            parse("9223372036854775807h", true).unwrap_err(),
            "invalid duration \"9223372036854775807h\": longer than 10 years"
        );
        assert!(parse("é", true).is_err());
    }
}
