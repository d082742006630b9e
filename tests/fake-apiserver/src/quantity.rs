//! Kubernetes resource quantities ("100m", "1Gi", "2", "1e3") as integer milli-units.
//!
//! Written for the harness scheduler and PDB arithmetic only; the project's planner has its own.

/// Parses a quantity into milli-units, rounding up like the API server's `MilliValue`.
/// `None` for an unparseable string.
pub(crate) fn parse_milli(s: &str) -> Option<i128> {
    let s = s.trim();
    let (sign, body) = match s.strip_prefix('-') {
        Some(rest) => (-1i128, rest),
        None => (1, s.strip_prefix('+').unwrap_or(s)),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    if num.is_empty() || num == "." {
        return None;
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    // Work in units of 10^-9 so every decimal suffix down to "n" is exact.
    let mut nanos: i128 = int_part
        .parse::<i128>()
        .unwrap_or(0)
        .checked_mul(1_000_000_000)?;
    if !frac_part.is_empty() {
        let digits: String = frac_part.chars().take(9).collect();
        let scale = 10i128.pow(9 - digits.len() as u32);
        nanos += digits.parse::<i128>().ok()? * scale;
    }
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            if exp >= 0 {
                (10i128.checked_pow(exp as u32)?, 1)
            } else {
                (1, 10i128.checked_pow((-exp) as u32)?)
            }
        }
        _ => return None,
    };
    let scaled = nanos.checked_mul(mul)?;
    // nanos -> millis: divide by 10^6 (and by the suffix's divisor), rounding up.
    let denom = 1_000_000i128.checked_mul(div)?;
    let milli = (scaled + denom - 1).div_euclid(denom);
    Some(sign * milli)
}

#[cfg(test)]
mod tests {
    use super::parse_milli;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("1Gi"), Some(1_073_741_824_000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("1n"), Some(1));
        assert_eq!(parse_milli("-2"), Some(-2000));
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("1Q"), None);
    }
}
