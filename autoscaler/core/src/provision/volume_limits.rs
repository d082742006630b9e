//! CSI volume limits on existing nodes: how many more volumes each driver may attach, as
//! kube-scheduler's `NodeVolumeLimits` filter counts them and Karpenter's volume usage
//! (`pkg/scheduling/volumeusage.go`) mirrors it for existing nodes.
//!
//! A node's limits come from its CSINode object ([`crate::model::Node::volume_limits`]).
//! Claims in flight and new claims have no CSINode yet: they take the counts the existing
//! nodes of their pool and instance type show (else any node of the type); a new claim it drops the candidate types whose
//! count its volumes exceed and attaches at most the least count of the types left, as KEP-5030 proposes for the Cluster Autoscaler (a node template takes the
//! CSINode of a node of its group); Karpenter leaves new nodes unlimited. A type no node has shown is
//! unlimited, and a pod no candidate could ever attach launches nothing. A pod is refused only
//! by a driver it adds a volume of: a node already over a driver's limit (a limit lowered
//! under running pods) still takes pods that add none.

use std::collections::{BTreeMap, HashMap};

use crate::model::AttachedVolume;

use super::Planner;
use super::key_hash::KeyMap;

/// What a node's limited drivers have attached, and may still attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct VolumeRoom {
    /// Per limited driver, sorted by name: its limit and the distinct volume ids attached,
    /// sorted.
    drivers: Vec<(String, u32, Vec<String>)>,
}

impl VolumeRoom {
    /// The room of a node with `limits`; `None` when no driver is limited (the usual node,
    /// which then costs the planner nothing).
    pub(super) fn new(limits: &BTreeMap<String, u32>) -> Option<Box<VolumeRoom>> {
        if limits.is_empty() {
            return None;
        }
        Some(Box::new(VolumeRoom {
            drivers: limits
                .iter()
                .map(|(d, n)| (d.clone(), *n, Vec::new()))
                .collect(),
        }))
    }

    /// Records `volumes` as attached (a volume already there counts once).
    pub(super) fn attach(&mut self, volumes: &[AttachedVolume]) {
        for v in volumes {
            if let Some(ids) = self.ids_mut(&v.driver)
                && let Err(at) = ids.binary_search(&v.id)
            {
                ids.insert(at, v.id.clone());
            }
        }
    }

    /// Whether a pod attaching `volumes` keeps every limited driver it adds a volume of
    /// within its limit.
    pub(super) fn admits(&self, volumes: &[AttachedVolume]) -> bool {
        self.over_limit(volumes).is_none()
    }

    /// The first limited driver `volumes` would take past its limit: (driver, limit, volumes
    /// attached, volumes the pod adds).
    pub(super) fn over_limit(
        &self,
        volumes: &[AttachedVolume],
    ) -> Option<(&str, u32, usize, usize)> {
        for (driver, limit, ids) in &self.drivers {
            let mut new: Vec<&str> = volumes
                .iter()
                .filter(|v| v.driver == *driver && ids.binary_search(&v.id).is_err())
                .map(|v| v.id.as_str())
                .collect();
            new.sort_unstable();
            new.dedup();
            if !new.is_empty() && ids.len() + new.len() > *limit as usize {
                return Some((driver, *limit, ids.len(), new.len()));
            }
        }
        None
    }

    /// How many distinct volumes of `driver` are attached (0 for a driver not limited here).
    pub(super) fn attached(&self, driver: &str) -> usize {
        self.drivers
            .binary_search_by(|(d, _, _)| d.as_str().cmp(driver))
            .map_or(0, |i| self.drivers[i].2.len())
    }

    /// Takes `limits` as the room's counts, keeping what is attached for the drivers still
    /// limited: a new claim whose candidates narrowed may attach as much as the least of the
    /// types left. Returns whether some driver may now attach more than before (a higher
    /// count, or none).
    pub(super) fn relimit(&mut self, limits: &BTreeMap<String, u32>) -> bool {
        let mut drivers = Vec::with_capacity(limits.len());
        let mut rose = false;
        for (d, n) in limits {
            let ids = match self.drivers.binary_search_by(|(x, _, _)| x.as_str().cmp(d)) {
                Ok(i) => {
                    rose |= *n > self.drivers[i].1;
                    std::mem::take(&mut self.drivers[i].2)
                }
                Err(_) => Vec::new(),
            };
            drivers.push((d.clone(), *n, ids));
        }
        rose |= self.drivers.iter().any(|(d, _, _)| !limits.contains_key(d));
        self.drivers = drivers;
        rose
    }

    fn ids_mut(&mut self, driver: &str) -> Option<&mut Vec<String>> {
        self.drivers
            .binary_search_by(|(d, _, _)| d.as_str().cmp(driver))
            .ok()
            .map(|i| &mut self.drivers[i].2)
    }
}

/// Lowers each driver's count in `into` to `from`'s where `from` has one, adding the drivers
/// `into` lacks. Thousands of nodes share a few drivers: a driver's name is copied once.
fn least_counts(into: &mut BTreeMap<String, u32>, from: &BTreeMap<String, u32>) {
    for (driver, count) in from {
        match into.get_mut(driver) {
            Some(c) => *c = (*c).min(*count),
            None => {
                into.insert(driver.clone(), *count);
            }
        }
    }
}

/// How a pod's volumes bear on where it may go, while some node has a CSI volume limit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum VolumeScan<'a> {
    /// No volumes, or no node with a limit.
    None,
    /// Volumes no other pod of the snapshot names, per driver how many (sorted by driver):
    /// wherever the pod goes it attaches all of them, so a place that refuses one such pod
    /// refuses every pod of the same counts until it holds fewer volumes, which a plan never
    /// makes it do.
    Own(Vec<(&'a str, u32)>),
    /// A volume another pod names too: a place that refused one such pod may take the next,
    /// whose volume is there already.
    Shared,
}

impl Planner<'_> {
    /// Fills [`Planner::shape_volume_limits`] from the existing nodes' CSI attach counts, as
    /// KEP-5030 proposes for the Cluster Autoscaler's node templates: nodes of one pool and
    /// instance type get the same drivers and counts; a pool with no node of a type that some
    /// other node (another pool's, or one no pool manages) is takes the least such nodes show.
    pub(super) fn learn_volume_limits(&mut self, pool_idx: &KeyMap<&str, usize>) {
        let mut learned: HashMap<(usize, &str), BTreeMap<String, u32>> = HashMap::new();
        // Any node of the type, whatever its pool or none: what a type attaches is mostly the
        // type's (its attachment slots), so a pool none of whose nodes showed a count takes
        // the least any node of the type showed.
        let mut by_type: HashMap<&str, BTreeMap<String, u32>> = HashMap::new();
        for n in self
            .snap
            .nodes
            .iter()
            .filter(|n| !n.volume_limits.is_empty())
        {
            let Some(t) = n.instance_type.as_deref() else {
                continue;
            };
            least_counts(by_type.entry(t).or_default(), &n.volume_limits);
            if let Some(pi) = n.pool.as_deref().and_then(|p| pool_idx.get(p).copied()) {
                least_counts(learned.entry((pi, t)).or_default(), &n.volume_limits);
            }
        }
        self.learned_drivers = by_type.values().flat_map(|l| l.keys().cloned()).collect();
        self.shape_volume_limits = if by_type.is_empty() {
            Vec::new()
        } else {
            self.shapes
                .iter()
                .map(|s| {
                    learned
                        .get(&(s.pool, &*s.name))
                        .or_else(|| by_type.get(&*s.name))
                        .cloned()
                })
                .collect()
        };
    }

    /// Whether a known attach count may bound how many pods like pod `i` a node holds: its
    /// volumes are its own and some is of a driver a node showed a count for.
    pub(super) fn volume_capped(&self, i: usize) -> bool {
        !self.shares_volumes[i]
            && self.snap.pending[i]
                .volumes
                .iter()
                .any(|v| self.learned_drivers.contains(&v.driver))
    }

    /// How many pods like pod `i` a node of shape `c` attaches: per driver the shape's known
    /// count over the pod's own volumes of it, the least over drivers (0 when it cannot
    /// attach one). `None` when no count bounds it (no volumes, no known count, or a volume
    /// another pod names too, which may be attached there already). Claim sizing takes it as
    /// it takes resources: a node of a type that attaches 25 volumes holds 25 replicas with a
    /// claim each, however large it is.
    pub(super) fn volume_copies(&self, i: usize, c: usize) -> Option<f64> {
        if !self.volume_capped(i) {
            return None;
        }
        let pod = &self.snap.pending[i];
        let limits = self.shape_volume_limits.get(c)?.as_ref()?;
        let mut ids: Vec<(&str, &str)> = pod
            .volumes
            .iter()
            .map(|v| (v.driver.as_str(), v.id.as_str()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        limits
            .iter()
            .filter_map(|(driver, count)| {
                let k = ids.iter().filter(|(d, _)| d == driver).count();
                (k > 0).then(|| (f64::from(*count) / k as f64).floor())
            })
            .reduce(f64::min)
    }

    /// The volume room of a new claim that may become any of `candidates`: per driver, the
    /// least count a candidate is known to allow (a candidate no node has shown counts for
    /// nothing), so that whichever the claim becomes attaches what the plan puts on it.
    pub(super) fn claim_volume_room(
        &self,
        candidates: &[usize],
    ) -> Option<Box<super::volume_limits::VolumeRoom>> {
        if self.shape_volume_limits.is_empty() {
            return None;
        }
        super::volume_limits::VolumeRoom::new(&self.claim_volume_limits(candidates))
    }

    /// Per driver, the least count a candidate among `candidates` is known to allow.
    pub(super) fn claim_volume_limits(&self, candidates: &[usize]) -> BTreeMap<String, u32> {
        let mut limits: BTreeMap<String, u32> = BTreeMap::new();
        for known in candidates
            .iter()
            .filter_map(|c| self.shape_volume_limits.get(*c)?.as_ref())
        {
            least_counts(&mut limits, known);
        }
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(driver: &str, id: &str) -> AttachedVolume {
        AttachedVolume {
            driver: driver.into(),
            id: id.into(),
        }
    }

    fn room(limits: &[(&str, u32)]) -> Box<VolumeRoom> {
        let limits = limits.iter().map(|(d, n)| (d.to_string(), *n)).collect();
        VolumeRoom::new(&limits).expect("limits given")
    }

    #[test]
    fn no_limits_means_no_room_to_track() {
        assert_eq!(VolumeRoom::new(&BTreeMap::new()), None);
    }

    #[test]
    fn a_driver_at_its_limit_refuses_a_new_volume_and_takes_one_already_attached() {
        let mut r = room(&[("ebs", 2)]);
        r.attach(&[vol("ebs", "ns/a"), vol("ebs", "ns/b")]);
        assert_eq!(r.over_limit(&[vol("ebs", "ns/c")]), Some(("ebs", 2, 2, 1)));
        assert!(
            r.admits(&[vol("ebs", "ns/a")]),
            "a shared claim counts once"
        );
        assert!(r.admits(&[]), "a pod without volumes is not counted");
        assert!(
            r.admits(&[vol("efs", "ns/x")]),
            "a driver without a limit is unlimited"
        );
    }

    #[test]
    fn a_pods_own_volumes_count_once_each_and_add_up() {
        let mut r = room(&[("ebs", 3)]);
        r.attach(&[vol("ebs", "ns/a"), vol("ebs", "ns/a")]);
        assert!(r.admits(&[vol("ebs", "ns/b"), vol("ebs", "ns/b"), vol("ebs", "ns/c")]));
        assert!(!r.admits(&[vol("ebs", "ns/b"), vol("ebs", "ns/c"), vol("ebs", "ns/d")]));
        r.attach(&[vol("ebs", "ns/b")]);
        assert!(r.admits(&[vol("ebs", "ns/c")]));
        assert!(!r.admits(&[vol("ebs", "ns/c"), vol("ebs", "ns/d")]));
    }

    #[test]
    fn a_node_over_a_limit_still_takes_pods_that_add_nothing_to_that_driver() {
        let mut r = room(&[("ebs", 1), ("gp", 5)]);
        r.attach(&[vol("ebs", "ns/a"), vol("ebs", "ns/b")]);
        assert!(r.admits(&[vol("gp", "ns/c")]));
        assert!(r.admits(&[vol("ebs", "ns/b")]));
        assert!(!r.admits(&[vol("ebs", "ns/z")]));
    }
}
