//! Offerings and the launch candidates of a claim, shared by the controller and the simulator:
//! [`OfferingKey`] (an instance type in a zone as spot or on-demand), the expiring exclusions
//! (offerings a cloud recently refused, the insufficient-capacity cache, and NodePool instance
//! types whose nodes registered with less than they were launched for, each kept out of plans
//! for a while so that the next launch does not walk into the same wall), and [`candidates`],
//! the order in which a claim's offerings are tried.

use std::collections::BTreeMap;
use std::fmt;

use crate::instance::{CapacityType, InstanceType};
use crate::labels;
use crate::plan::NewClaim;
use crate::requirements::{Constraint, Operator, Requirements};

/// One thing a provider can be asked to launch: an instance type in a zone as spot or on-demand.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingKey {
    /// Instance type name.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
}

impl OfferingKey {
    /// Builds a key.
    pub fn new(
        instance_type: impl Into<String>,
        zone: impl Into<String>,
        capacity_type: CapacityType,
    ) -> Self {
        OfferingKey {
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type,
        }
    }
}

impl fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.instance_type, self.zone, self.capacity_type
        )
    }
}

/// The requirements a planned claim is launched with, as its NodeClaim carries them: the
/// claim's requirements with the instance type narrowed to the types the planner kept for it.
pub fn launch_requirements(claim: &NewClaim) -> Requirements {
    let mut r = claim.requirements.clone();
    let names: Vec<String> = claim
        .instance_types
        .iter()
        .map(|o| o.instance_type.to_string())
        .collect();
    if let Ok(c) = Constraint::from_operator(labels::INSTANCE_TYPE, Operator::In, &names) {
        r.add_constraint(labels::INSTANCE_TYPE, c);
    }
    r
}

/// The offerings a claim may launch on, cheapest first (ties by key): its instance-type, zone
/// and capacity-type requirements over `types`, minus offerings `unavailable` holds at `now`.
/// The provider takes the first it can get.
pub fn candidates(
    requirements: &Requirements,
    types: &[InstanceType],
    unavailable: &UnavailableOfferings,
    now: i64,
) -> Vec<(OfferingKey, f64)> {
    let any = Constraint::any();
    let it_c = requirements.get(labels::INSTANCE_TYPE).unwrap_or(&any);
    let zone_c = requirements.get(labels::ZONE).unwrap_or(&any);
    let ct_c = requirements.get(labels::CAPACITY_TYPE).unwrap_or(&any);
    let mut out = Vec::new();
    for t in types.iter().filter(|t| it_c.matches(Some(&t.name))) {
        for o in &t.offerings {
            let key = OfferingKey::new(&t.name, &o.zone, o.capacity_type);
            if zone_c.matches(Some(&o.zone))
                && ct_c.matches(Some(o.capacity_type.as_str()))
                && !unavailable.is_unavailable(&key, now)
            {
                out.push((key, o.price));
            }
        }
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Keys excluded until their entry expires: one cache type for every kind of exclusion.
///
/// Time is a parameter (seconds on the caller's clock, as everywhere in the core), so the cache
/// is deterministic and the simulator can drive it on virtual time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expiring<K> {
    ttl_s: i64,
    until: BTreeMap<K, i64>,
}

/// Offerings recently refused for lack of capacity.
pub type UnavailableOfferings = Expiring<OfferingKey>;

/// NodePool instance types whose nodes came up with less than the NodePool said they would
/// (a device plugin configured otherwise than the pool's GPU sharing, missing devices).
pub type UnavailableShapes = Expiring<ShapeKey>;

/// One instance type as one NodePool's node: what the planner calls a shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeKey {
    /// NodePool name.
    pub pool: String,
    /// Instance type name.
    pub instance_type: String,
}

impl ShapeKey {
    /// Builds a key.
    pub fn new(pool: impl Into<String>, instance_type: impl Into<String>) -> Self {
        ShapeKey {
            pool: pool.into(),
            instance_type: instance_type.into(),
        }
    }
}

impl fmt::Display for ShapeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in NodePool {}", self.instance_type, self.pool)
    }
}

impl<K: Ord> Default for Expiring<K> {
    fn default() -> Self {
        Self::new(Self::DEFAULT_TTL_S)
    }
}

impl<K: Ord> Expiring<K> {
    /// Three minutes: long enough to stop hammering an exhausted pool, short enough that freed
    /// capacity (spot especially) is tried again soon. Karpenter uses the same.
    pub const DEFAULT_TTL_S: i64 = 180;

    /// An empty cache whose entries last `ttl_s` seconds.
    pub fn new(ttl_s: i64) -> Self {
        Expiring {
            ttl_s: ttl_s.max(0),
            until: BTreeMap::new(),
        }
    }

    /// How long entries last.
    pub fn ttl_s(&self) -> i64 {
        self.ttl_s
    }

    /// Records that `key` was refused at `now`; a repeated refusal extends the entry.
    pub fn mark(&mut self, key: K, now: i64) {
        let expires = now.saturating_add(self.ttl_s);
        let entry = self.until.entry(key).or_insert(expires);
        *entry = (*entry).max(expires);
    }

    /// [`Self::mark`] for every key.
    pub fn mark_all(&mut self, keys: impl IntoIterator<Item = K>, now: i64) {
        for key in keys {
            self.mark(key, now);
        }
    }

    /// Whether no entry is held, expired or not (nothing is unavailable): lets a caller that
    /// would build a key for every offering skip that.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }

    /// Whether `key` is still considered unavailable at `now`.
    pub fn is_unavailable(&self, key: &K, now: i64) -> bool {
        self.until.get(key).is_some_and(|until| now < *until)
    }

    /// Forgets entries expired at `now`, so the cache does not grow without bound.
    pub fn prune(&mut self, now: i64) {
        self.until.retain(|_, until| now < *until);
    }

    /// Entries unavailable at `now` with their expiry, in key order.
    pub fn active(&self, now: i64) -> impl Iterator<Item = (&K, i64)> + '_ {
        self.until
            .iter()
            .filter(move |(_, until)| now < **until)
            .map(|(k, until)| (k, *until))
    }
}

impl Expiring<OfferingKey> {
    /// Marks every offering of `types` that is unavailable at `now` as `available: false`.
    /// Offerings already unavailable stay so: the cache only ever removes capacity.
    pub fn apply(&self, types: &mut [InstanceType], now: i64) {
        if self.until.is_empty() {
            return;
        }
        for it in types {
            for o in &mut it.offerings {
                let key = OfferingKey::new(&it.name, &o.zone, o.capacity_type);
                if self.is_unavailable(&key, now) {
                    o.available = false;
                }
            }
        }
    }
}

impl Expiring<ShapeKey> {
    /// Marks every offering of the types excluded for `pool` at `now` as `available: false`
    /// (the planner then drops the shape), leaving other pools' views of the same type alone.
    pub fn apply_to_pool(&self, pool: &str, types: &mut [InstanceType], now: i64) {
        if self.until.is_empty() {
            return;
        }
        for it in types {
            if self.is_unavailable(&ShapeKey::new(pool, &it.name), now) {
                for o in &mut it.offerings {
                    o.available = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::itype;
    use crate::instance::CapacityType;

    #[test]
    fn candidates_follow_requirements_and_skip_refused_offerings() {
        let types = vec![
            itype("small")
                .on_demand(&["a", "b"], 1.0)
                .offer("a", CapacityType::Spot, 0.3)
                .build(),
            itype("big").on_demand(&["a"], 5.0).build(),
        ];
        let r = Requirements::new()
            .with(labels::INSTANCE_TYPE, Operator::In, &["small", "big"])
            .with(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]);
        let mut u = UnavailableOfferings::default();
        u.mark(OfferingKey::new("small", "a", CapacityType::OnDemand), 100);
        let got: Vec<String> = candidates(&r, &types, &u, 100)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(got, vec!["small/b/on-demand", "big/a/on-demand"]);
    }
}
