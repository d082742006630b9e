//! Scenario scalars that fail while deserializing, so serde_norway attaches the line and the
//! field to the error: durations in the core's one grammar and Kubernetes quantities.

use std::fmt;

use autoscaler_core::duration::{self, Bare};
use autoscaler_core::quantity::Quantity;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

/// A duration in whole seconds, in the core's one grammar ([`autoscaler_core::duration`]): a
/// number of seconds, or text such as `90s`, `10m`, `1h30m`, `1.5h`, `2d`. Negative,
/// non-finite and longer than ten years are rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub i64);

/// Parses a duration as [`Dur`] accepts it, in whole seconds (rounded to the nearest).
///
/// # Errors
/// The core's message naming the text: negative, empty, malformed or longer than ten years.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    duration::parse(text.trim(), Bare::Seconds)
        .map(duration::whole_seconds)
        .map_err(|e| e.to_string())
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 90, \"90s\", \"10m\" or \"1h30m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                duration::from_secs_f64(v)
                    .map(|d| Dur(duration::whole_seconds(d)))
                    .map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A Kubernetes quantity (`500m`, `2Gi`, `4`), checked while deserializing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qty(pub Quantity);

impl<'de> Deserialize<'de> for Qty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Qty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as 500m, 2Gi or 4")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Qty, E> {
                let q = Quantity::parse(v).map_err(E::custom)?;
                if q.is_negative() {
                    return Err(E::custom(format!("negative quantity {v:?}")));
                }
                Ok(Qty(q))
            }
        }
        d.deserialize_any(V)
    }
}
