//! Node overlays: price and capacity overrides of a catalog's instance types, selected by
//! requirements, in the shape of Karpenter's `NodeOverlay` (the `NodeOverlay` object of the
//! `nodepools` crate parses into an [`Overlay`]).
//!
//! [`apply_overlays`] is the one place they take effect: the controller, `explain`,
//! `validate` and the simulator all pass their catalog through it before building pools, so
//! the planner, the launch order, the prices of existing nodes and the answers of `explain`
//! see the same adjusted types.
//!
//! Rules (Karpenter's, as its documentation states them):
//! - An overlay's requirements are matched per offering, against the type's labels plus the
//!   offering's zone ([`labels::ZONE`]) and capacity type ([`labels::CAPACITY_TYPE`]); no
//!   requirements select everything.
//! - Overlays are ranked by weight (higher first), then by name. Of the overlays that change
//!   the price and match an offering, only the first in rank applies to it.
//! - Capacity entries add extended resources a type does not have: for each resource the type
//!   lacks, the first overlay in rank that names it and matches some offering of the type
//!   decides its amount. A resource the catalog already lists keeps the catalog's amount
//!   (overlays add, they do not replace), and the API refuses `cpu`, `memory`,
//!   `ephemeral-storage` and `pods`.

use std::fmt;

use crate::instance::InstanceType;
use crate::labels;
use crate::requirements::{Labels, Requirements};
use crate::resources::Resources;

/// How an overlay changes an offering's price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// `price`: the price becomes this (USD per hour).
    Set(f64),
    /// `priceAdjustment: "+0.50"`: this amount is added (may be negative).
    Delta(f64),
    /// `priceAdjustment: "-10%"`: the price changes by this many percent (at least -100).
    Percent(f64),
}

impl PriceChange {
    /// Parses a `priceAdjustment`: a signed decimal (`+0.5`, `-2`), optionally followed by `%`.
    ///
    /// # Errors
    /// A sentence naming the text when it is not such a number, is not finite, or lowers a
    /// price by more than 100 %.
    pub fn parse_adjustment(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{text:?} is not a price adjustment (a signed number such as \"+0.50\" or \"-10%\")"
            )
        };
        let (number, percent) = match text.strip_suffix('%') {
            Some(n) => (n, true),
            None => (text, false),
        };
        let digits = number.strip_prefix(['+', '-']).unwrap_or(number);
        let well_formed = !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
            && digits.chars().filter(|c| *c == '.').count() <= 1
            && digits.chars().any(|c| c.is_ascii_digit());
        if !well_formed || digits.len() > 20 {
            return Err(bad());
        }
        let v: f64 = number.parse().map_err(|_| bad())?;
        if !v.is_finite() {
            return Err(bad());
        }
        if percent {
            if v < -100.0 {
                return Err(format!("{text:?} lowers the price by more than 100 %"));
            }
            Ok(PriceChange::Percent(v))
        } else {
            Ok(PriceChange::Delta(v))
        }
    }

    /// Parses a `price`: a non-negative decimal number of USD per hour.
    ///
    /// # Errors
    /// A sentence naming the text when it is not a finite, non-negative number.
    pub fn parse_price(text: &str) -> Result<Self, String> {
        let digits_only = !text.is_empty()
            && text.len() <= 20
            && text.chars().all(|c| c.is_ascii_digit() || c == '.')
            && text.chars().filter(|c| *c == '.').count() <= 1
            && text.chars().any(|c| c.is_ascii_digit());
        match text.parse::<f64>() {
            Ok(v) if digits_only && v.is_finite() => Ok(PriceChange::Set(v)),
            _ => Err(format!(
                "{text:?} is not a price (a non-negative number such as \"1.25\")"
            )),
        }
    }

    /// The price after the change; never negative.
    pub fn apply(self, price: f64) -> f64 {
        let p = match self {
            PriceChange::Set(p) => p,
            PriceChange::Delta(d) => price + d,
            PriceChange::Percent(pc) => price * (1.0 + pc / 100.0),
        };
        p.max(0.0)
    }
}

impl fmt::Display for PriceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriceChange::Set(p) => write!(f, "price {p}"),
            PriceChange::Delta(d) => write!(f, "price {d:+}"),
            PriceChange::Percent(p) => write!(f, "price {p:+}%"),
        }
    }
}

/// One overlay in the core's vocabulary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overlay {
    /// The object's name (ties between equal weights go to the name first in order).
    pub name: String,
    /// Precedence: higher first.
    pub weight: i32,
    /// Which offerings (type labels plus zone and capacity type) it applies to.
    pub requirements: Requirements,
    /// The price change, if any.
    pub price: Option<PriceChange>,
    /// Extended resources added to the matching types that lack them.
    pub capacity: Resources,
}

impl Overlay {
    /// Whether the overlay selects `offering_labels` (a type's labels with an offering's zone
    /// and capacity type).
    fn selects(&self, offering_labels: &Labels) -> bool {
        self.requirements.matches(offering_labels)
    }
}

/// The overlays in rank order: weight descending, then name.
pub fn ranked(overlays: &[Overlay]) -> Vec<&Overlay> {
    let mut out: Vec<&Overlay> = overlays.iter().collect();
    out.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    out
}

/// The labels of one offering of `it`: the type's labels, its zone and its capacity type.
fn offering_labels(it: &InstanceType, zone: &str, capacity_type: &str) -> Labels {
    let mut l = it.labels.clone();
    l.insert(labels::ZONE.to_string(), zone.to_string());
    l.insert(labels::CAPACITY_TYPE.to_string(), capacity_type.to_string());
    l
}

/// `types` with `overlays` applied (see the module documentation for the rules). Types no
/// overlay selects come back unchanged; the order of types and offerings is kept.
pub fn apply_overlays(types: &[InstanceType], overlays: &[Overlay]) -> Vec<InstanceType> {
    if overlays.is_empty() {
        return types.to_vec();
    }
    let ranked = ranked(overlays);
    types
        .iter()
        .map(|it| {
            let mut out = it.clone();
            let mut capacity_set: Vec<&str> = Vec::new();
            let per_offering: Vec<Labels> = it
                .offerings
                .iter()
                .map(|o| offering_labels(it, &o.zone, o.capacity_type.as_str()))
                .collect();
            for (o, l) in out.offerings.iter_mut().zip(&per_offering) {
                if let Some(change) = ranked
                    .iter()
                    .filter(|ov| ov.selects(l))
                    .find_map(|ov| ov.price)
                {
                    o.price = change.apply(o.price);
                }
            }
            for ov in &ranked {
                if ov.capacity.is_zero() {
                    continue;
                }
                let selects_type = if per_offering.is_empty() {
                    ov.selects(&it.labels)
                } else {
                    per_offering.iter().any(|l| ov.selects(l))
                };
                if !selects_type {
                    continue;
                }
                for (name, amount) in ov.capacity.iter() {
                    if !capacity_set.contains(&name) && it.capacity.get(name) == 0 {
                        capacity_set.push(name);
                        out.capacity.set(name, amount);
                    }
                }
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::itype;
    use crate::instance::CapacityType;
    use crate::requirements::Operator;

    fn types() -> Vec<InstanceType> {
        vec![
            itype("a.large")
                .on_demand(&["z1"], 1.0)
                .offer("z1", CapacityType::Spot, 0.4)
                .build(),
            itype("b.large").on_demand(&["z1"], 2.0).build(),
        ]
    }

    fn prices(t: &[InstanceType]) -> Vec<(String, String, f64)> {
        t.iter()
            .flat_map(|it| {
                it.offerings
                    .iter()
                    .map(|o| (it.name.clone(), o.capacity_type.to_string(), o.price))
            })
            .collect()
    }

    fn overlay(name: &str, weight: i32, reqs: Requirements, price: Option<PriceChange>) -> Overlay {
        Overlay {
            name: name.into(),
            weight,
            requirements: reqs,
            price,
            capacity: Resources::new(),
        }
    }

    #[test]
    fn adjustments_parse_and_apply() {
        let cases = [
            ("+10%", 2.2),
            ("-50%", 1.0),
            ("-100%", 0.0),
            ("+0.5", 2.5),
            ("-3", 0.0),
            ("1.5", 3.5),
        ];
        for (text, want) in cases {
            let c = PriceChange::parse_adjustment(text).unwrap();
            assert!(
                (c.apply(2.0) - want).abs() < 1e-9,
                "{text}: {}",
                c.apply(2.0)
            );
        }
        for bad in [
            "", "%", "+", "ten", "1e3", "--1", "+1.2.3", "-101%", "NaN", "inf",
        ] {
            assert!(PriceChange::parse_adjustment(bad).is_err(), "{bad}");
        }
        assert_eq!(PriceChange::parse_price("0.25"), Ok(PriceChange::Set(0.25)));
        for bad in ["-1", "+1", "", "1e9", "x", "10%"] {
            assert!(PriceChange::parse_price(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn price_per_offering_first_in_rank_wins() {
        let spot = Requirements::new().with(labels::CAPACITY_TYPE, Operator::In, &["spot"]);
        let overlays = [
            overlay(
                "all",
                1,
                Requirements::new(),
                Some(PriceChange::Percent(100.0)),
            ),
            overlay("spot", 5, spot, Some(PriceChange::Set(0.1))),
            // Same weight as `all`, later name: never reached.
            overlay("zzz", 1, Requirements::new(), Some(PriceChange::Set(9.0))),
        ];
        assert_eq!(
            prices(&apply_overlays(&types(), &overlays)),
            [
                ("a.large".into(), "on-demand".into(), 2.0),
                ("a.large".into(), "spot".into(), 0.1),
                ("b.large".into(), "on-demand".into(), 4.0),
            ]
        );
    }

    #[test]
    fn capacity_adds_what_a_type_lacks_and_never_replaces() {
        let t = vec![
            itype("g.x")
                .gpus(1, "L4", 24)
                .on_demand(&["z1"], 1.0)
                .build(),
        ];
        let mut ov = overlay("more", 1, Requirements::new(), None);
        ov.capacity = Resources::new()
            .with("nvidia.com/gpu", 8)
            .with("example.com/slice", 2);
        let out = apply_overlays(&t, &[ov]);
        assert_eq!(out[0].capacity.get("nvidia.com/gpu"), 1);
        assert_eq!(out[0].capacity.get("example.com/slice"), 2);
    }

    #[test]
    fn capacity_merges_by_rank_and_only_on_selected_types() {
        let only_a = Requirements::new().with(labels::INSTANCE_TYPE, Operator::In, &["a.large"]);
        let mut high = overlay("high", 10, only_a.clone(), None);
        high.capacity = Resources::new().with("example.com/slice", 4);
        let mut low = overlay("low", 0, only_a, None);
        low.capacity = Resources::new()
            .with("example.com/slice", 1)
            .with("example.com/other", 2);
        let out = apply_overlays(&types(), &[low, high]);
        assert_eq!(out[0].capacity.get("example.com/slice"), 4);
        assert_eq!(out[0].capacity.get("example.com/other"), 2);
        assert_eq!(out[1], types()[1]);
        // Prices untouched by capacity-only overlays.
        assert_eq!(prices(&out), prices(&types()));
    }
}
