//! The expiring exclusions (the unavailable-offerings cache and the excluded shapes) are the
//! core's ([`autoscaler_core::offerings`]), shared with the simulator; they are re-exported here
//! for the providers, and tested here against the embedded catalog.

pub use autoscaler_core::offerings::{Expiring, ShapeKey, UnavailableOfferings, UnavailableShapes};

#[cfg(test)]
mod tests {
    use autoscaler_core::CapacityType::{OnDemand, Spot};

    use super::*;
    use crate::catalog;
    use crate::provider::OfferingKey;

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
