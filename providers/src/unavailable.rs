//! Expiring exclusions: offerings a cloud recently refused (the insufficient-capacity cache),
//! and NodePool instance types whose nodes registered with less than they were launched for,
//! each kept out of plans for a while so that the next launch does not walk into the same wall.

use std::collections::BTreeMap;
use std::fmt;

use autoscaler_core::InstanceType;

use crate::provider::OfferingKey;

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
    use autoscaler_core::CapacityType::{OnDemand, Spot};

    use super::*;
    use crate::catalog;

    #[test]
    fn entries_expire_after_the_ttl() {
        let key = OfferingKey::new("p5.48xlarge", "us-east-1a", Spot);
        let mut cache = UnavailableOfferings::new(180);
        assert!(!cache.is_unavailable(&key, 0));
        cache.mark(key.clone(), 1000);
        assert!(cache.is_unavailable(&key, 1000));
        assert!(cache.is_unavailable(&key, 1179));
        assert!(!cache.is_unavailable(&key, 1180));
        // Another refusal at 1100 extends the entry; an older report does not shorten it.
        cache.mark(key.clone(), 1100);
        cache.mark(key.clone(), 900);
        assert!(cache.is_unavailable(&key, 1279));
        assert!(!cache.is_unavailable(&key, 1280));
        assert_eq!(cache.active(1200).count(), 1);
        cache.prune(1280);
        assert_eq!(cache, UnavailableOfferings::new(180));
    }

    #[test]
    fn apply_turns_off_only_the_refused_offerings() {
        let mut types: Vec<_> = catalog::default_catalog()
            .into_iter()
            .filter(|t| t.name == "p5.48xlarge" || t.name == "g5.xlarge")
            .collect();
        let mut cache = UnavailableOfferings::default();
        cache.mark_all(
            [
                OfferingKey::new("p5.48xlarge", "us-east-1a", Spot),
                OfferingKey::new("p5.48xlarge", "us-east-1b", OnDemand),
            ],
            10,
        );
        cache.apply(&mut types, 20);
        let off: Vec<String> = types
            .iter()
            .flat_map(|t| {
                t.offerings
                    .iter()
                    .filter(|o| !o.available)
                    .map(move |o| format!("{}/{}/{}", t.name, o.zone, o.capacity_type))
            })
            .collect();
        assert_eq!(
            off,
            [
                "p5.48xlarge/us-east-1a/spot",
                "p5.48xlarge/us-east-1b/on-demand"
            ]
        );
        let mut later = types.clone();
        for t in &mut later {
            for o in &mut t.offerings {
                o.available = true;
            }
        }
        cache.apply(&mut later, 10 + UnavailableOfferings::DEFAULT_TTL_S);
        assert!(
            later
                .iter()
                .all(|t| t.offerings.iter().all(|o| o.available))
        );
    }

    #[test]
    fn a_shape_is_excluded_for_its_pool_only() {
        let types: Vec<_> = catalog::default_catalog()
            .into_iter()
            .filter(|t| t.name == "g4dn.12xlarge" || t.name == "g5.xlarge")
            .collect();
        let mut shapes = UnavailableShapes::new(600);
        shapes.mark(ShapeKey::new("notebooks", "g4dn.12xlarge"), 100);
        let available = |pool: &str, now: i64| -> Vec<String> {
            let mut t = types.clone();
            shapes.apply_to_pool(pool, &mut t, now);
            t.iter()
                .filter(|t| t.offerings.iter().any(|o| o.available))
                .map(|t| t.name.clone())
                .collect()
        };
        assert_eq!(available("notebooks", 100), ["g5.xlarge"]);
        assert_eq!(available("other", 100), ["g4dn.12xlarge", "g5.xlarge"]);
        assert_eq!(available("notebooks", 700), ["g4dn.12xlarge", "g5.xlarge"]);
        assert_eq!(
            ShapeKey::new("notebooks", "g4dn.12xlarge").to_string(),
            "g4dn.12xlarge in NodePool notebooks"
        );
    }
}
