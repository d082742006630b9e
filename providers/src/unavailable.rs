//! The insufficient-capacity cache: offerings a cloud recently refused, kept out of plans for a
//! while so that the next launch does not walk into the same wall.

use std::collections::BTreeMap;

use autoscaler_core::InstanceType;

use crate::provider::OfferingKey;

/// Offerings recently refused for lack of capacity, each until its entry expires.
///
/// Time is a parameter (seconds on the caller's clock, as everywhere in the core), so the cache
/// is deterministic and the simulator can drive it on virtual time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnavailableOfferings {
    ttl_s: i64,
    until: BTreeMap<OfferingKey, i64>,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        Self::new(Self::DEFAULT_TTL_S)
    }
}

impl UnavailableOfferings {
    /// Three minutes: long enough to stop hammering an exhausted pool, short enough that freed
    /// capacity (spot especially) is tried again soon. Karpenter uses the same.
    pub const DEFAULT_TTL_S: i64 = 180;

    /// An empty cache whose entries last `ttl_s` seconds.
    pub fn new(ttl_s: i64) -> Self {
        UnavailableOfferings {
            ttl_s: ttl_s.max(0),
            until: BTreeMap::new(),
        }
    }

    /// How long entries last.
    pub fn ttl_s(&self) -> i64 {
        self.ttl_s
    }

    /// Records that `key` was refused at `now`; a repeated refusal extends the entry.
    pub fn mark(&mut self, key: OfferingKey, now: i64) {
        let expires = now.saturating_add(self.ttl_s);
        let entry = self.until.entry(key).or_insert(expires);
        *entry = (*entry).max(expires);
    }

    /// [`Self::mark`] for every key.
    pub fn mark_all(&mut self, keys: impl IntoIterator<Item = OfferingKey>, now: i64) {
        for key in keys {
            self.mark(key, now);
        }
    }

    /// Whether `key` is still considered unavailable at `now`.
    pub fn is_unavailable(&self, key: &OfferingKey, now: i64) -> bool {
        self.until.get(key).is_some_and(|until| now < *until)
    }

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

    /// Forgets entries expired at `now`, so the cache does not grow without bound.
    pub fn prune(&mut self, now: i64) {
        self.until.retain(|_, until| now < *until);
    }

    /// Entries unavailable at `now` with their expiry, in key order.
    pub fn active(&self, now: i64) -> impl Iterator<Item = (&OfferingKey, i64)> + '_ {
        self.until
            .iter()
            .filter(move |(_, until)| now < **until)
            .map(|(k, until)| (k, *until))
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
}
