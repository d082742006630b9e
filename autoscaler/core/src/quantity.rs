//! Kubernetes resource quantities (`500m`, `1.5`, `16Gi`, `1e3`) parsed into exact integers.
//!
//! A quantity is kept as an exact number of thousandths ("millis") in an `i128`, so every
//! suffix Kubernetes accepts (up to `Ei` and `E`) and three decimal places survive without
//! floating point. Values with more precision than a milli are rounded up, as the API server
//! does when it canonicalises a quantity.

use std::fmt;

use crate::error::QuantityError;

/// An exact Kubernetes quantity, in thousandths of the base unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    millis: i128,
}

impl Quantity {
    /// A quantity of `millis` thousandths of the base unit.
    pub const fn from_millis(millis: i128) -> Self {
        Quantity { millis }
    }

    /// A quantity of `units` whole base units.
    pub const fn from_units(units: i64) -> Self {
        Quantity {
            millis: units as i128 * 1000,
        }
    }

    /// Parses a quantity as Kubernetes spells it.
    ///
    /// Accepts an optional sign, digits with an optional decimal point, and then either a
    /// binary suffix (`Ki Mi Gi Ti Pi Ei`), a decimal suffix (`n u m k M G T P E`) or a
    /// decimal exponent (`e3`, `E-2`).
    ///
    /// # Errors
    /// [`QuantityError`] naming the input when it is empty, has no digits, has an unknown
    /// suffix, or is too large to represent.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = |why: &'static str| QuantityError {
            input: input.to_string(),
            why,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty quantity"));
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return Err(err("no digits"));
        }
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if frac_part.contains('.') {
            return Err(err("more than one decimal point"));
        }
        // mantissa = digits as an integer, scaled by 10^-frac_len
        let digits: String = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 36 {
            return Err(err("too many digits"));
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err("bad digits"))?
        };
        let mut exp10: i32 = -(frac_part.len() as i32);
        let mut multiplier: i128 = 1;
        match suffix {
            "" => {}
            "Ki" => multiplier = 1 << 10,
            "Mi" => multiplier = 1 << 20,
            "Gi" => multiplier = 1 << 30,
            "Ti" => multiplier = 1 << 40,
            "Pi" => multiplier = 1 << 50,
            "Ei" => multiplier = 1 << 60,
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            other => {
                let exp = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(|| err("unknown suffix"))?;
                let e: i32 = exp.parse().map_err(|_| err("bad exponent"))?;
                if !(-40..=40).contains(&e) {
                    return Err(err("exponent out of range"));
                }
                exp10 += e;
            }
        }
        // millis = mantissa * multiplier * 10^(exp10 + 3), rounded up (away from zero for
        // positive values, as Kubernetes rounds requests up).
        let exp = exp10 + 3;
        let scaled = mantissa
            .checked_mul(multiplier)
            .ok_or_else(|| err("quantity too large"))?;
        let millis = if exp >= 0 {
            let p = 10i128
                .checked_pow(exp as u32)
                .ok_or_else(|| err("quantity too large"))?;
            scaled
                .checked_mul(p)
                .ok_or_else(|| err("quantity too large"))?
        } else {
            // Round up without `scaled + p - 1`, which wraps when `scaled` is within `p` of
            // the i128 limit (a 36-digit mantissa with a binary suffix).
            match 10i128.checked_pow((-exp) as u32) {
                Some(p) => scaled / p + i128::from(scaled % p != 0),
                None => i128::from(scaled > 0),
            }
        };
        if millis > i64::MAX as i128 * 1000 {
            return Err(err("quantity too large"));
        }
        Ok(Quantity {
            millis: if negative { -millis } else { millis },
        })
    }

    /// Thousandths of the base unit (cpu millicores).
    pub const fn millis(self) -> i128 {
        self.millis
    }

    /// Whole base units, rounded up (bytes of memory, counts of devices).
    pub fn units_ceil(self) -> i128 {
        self.millis.div_euclid(1000) + i128::from(self.millis.rem_euclid(1000) != 0)
    }

    /// Whether the value is a whole number of base units.
    pub fn is_whole(self) -> bool {
        self.millis % 1000 == 0
    }

    /// Whether the value is below zero.
    pub fn is_negative(self) -> bool {
        self.millis < 0
    }
}

impl fmt::Display for Quantity {
    /// Renders the canonical short form: whole units without suffix, otherwise millis with `m`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_whole() {
            write!(f, "{}", self.millis / 1000)
        } else {
            write!(f, "{}m", self.millis)
        }
    }
}

/// Serialized as its canonical string ([`fmt::Display`]), read back with [`Quantity::parse`].
impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Quantity::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

/// Formats a byte count with the largest binary suffix that divides it exactly.
pub fn format_bytes(bytes: i64) -> String {
    for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let unit = 1i64 << shift;
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Formats millicores as Kubernetes would (`2` or `500m`).
pub fn format_cpu(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> i128 {
        Quantity::parse(s).unwrap().millis()
    }

    #[test]
    fn parses_the_forms_kubernetes_accepts() {
        assert_eq!(m("500m"), 500);
        assert_eq!(m("1.5"), 1500);
        assert_eq!(m("2"), 2000);
        assert_eq!(m("16Gi"), 16 * (1 << 30) * 1000);
        assert_eq!(m("100Mi"), 100 * (1 << 20) * 1000);
        assert_eq!(m("1e3"), 1_000_000);
        assert_eq!(m("1E3"), 1_000_000);
        assert_eq!(m("1.5Gi"), 3 * (1 << 29) * 1000);
        assert_eq!(m("0.1"), 100);
        assert_eq!(m("1k"), 1_000_000);
        assert_eq!(m("1M"), 1_000_000_000);
        assert_eq!(m("+3"), 3000);
        assert_eq!(m("-3"), -3000);
        assert_eq!(m(".5"), 500);
        assert_eq!(m("1Ei"), (1i128 << 60) * 1000);
        assert_eq!(m("0"), 0);
    }

    #[test]
    fn rounds_sub_milli_precision_up() {
        assert_eq!(m("1n"), 1);
        assert_eq!(m("1500u"), 2);
        assert_eq!(m("0.0001"), 1);
        assert_eq!(Quantity::parse("1.0001").unwrap().units_ceil(), 2);
    }

    #[test]
    fn rejects_bad_input_with_reason() {
        for (input, why) in [
            ("", "empty quantity"),
            ("abc", "no digits"),
            ("12Qi", "unknown suffix"),
            ("1.2.3", "more than one decimal point"),
            ("1e", "bad exponent"),
            ("1e99", "exponent out of range"),
            ("99999999999999999999Ei", "quantity too large"),
            // mantissa × 1024 lands just below the i128 limit; rounding must not wrap it.
            (
                "166153499473114484112975.882535043071Ki",
                "quantity too large",
            ),
        ] {
            let e = Quantity::parse(input).unwrap_err();
            assert_eq!(e.why, why, "{input}");
            assert!(e.to_string().contains(&format!("{input:?}")), "{e}");
        }
    }

    #[test]
    fn values_near_the_i128_limit_round_without_wrapping() {
        // i128::MAX / 1024 as a 36-digit mantissa, scaled down so the value itself is small:
        // the product with the suffix is within rounding distance of the i128 limit.
        let q = Quantity::parse("0.166153499473114484112975882535043071Ki").unwrap();
        assert_eq!(q.millis(), 170_142);
        assert!(!q.is_negative());
        let q = Quantity::parse("-0.166153499473114484112975882535043071Ki").unwrap();
        assert_eq!(q.millis(), -170_142);
    }

    #[test]
    fn displays_canonical_form() {
        assert_eq!(Quantity::parse("1500m").unwrap().to_string(), "1500m");
        assert_eq!(Quantity::parse("2000m").unwrap().to_string(), "2");
        assert_eq!(format_bytes(16 << 30), "16Gi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_cpu(2500), "2500m");
    }

    proptest::proptest! {
        #[test]
        fn integer_round_trip(n in -1_000_000_000i64..1_000_000_000) {
            let q = Quantity::parse(&n.to_string()).unwrap();
            proptest::prop_assert_eq!(q.millis(), n as i128 * 1000);
            proptest::prop_assert_eq!(Quantity::parse(&q.to_string()).unwrap(), q);
        }

        #[test]
        fn millis_round_trip(n in 0i64..10_000_000) {
            let q = Quantity::parse(&format!("{n}m")).unwrap();
            proptest::prop_assert_eq!(q.millis(), n as i128);
        }

        #[test]
        fn never_panics(s in "\\PC{0,12}") {
            let _ = Quantity::parse(&s);
        }
    }
}
