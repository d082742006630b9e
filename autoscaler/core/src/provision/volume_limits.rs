//! CSI volume limits on existing nodes: how many more volumes each driver may attach, as
//! kube-scheduler's `NodeVolumeLimits` filter counts them and Karpenter's volume usage
//! (`pkg/scheduling/volumeusage.go`) mirrors it for existing nodes.
//!
//! A node's limits come from its CSINode object ([`crate::model::Node::volume_limits`]).
//! Claims in flight have no CSINode yet and are not limited. A new claim takes the counts the
//! existing nodes of its pool and instance type show: it drops the candidate types whose
//! count its volumes exceed and attaches at most the least count of the types left, as KEP-5030 proposes for the Cluster Autoscaler (a node template takes the
//! CSINode of a node of its group); Karpenter leaves new nodes unlimited. A type no node has shown is
//! unlimited, and a pod no candidate could ever attach launches nothing. A pod is refused only
//! by a driver it adds a volume of: a node already over a driver's limit (a limit lowered
//! under running pods) still takes pods that add none.

use std::collections::BTreeMap;

use crate::model::AttachedVolume;

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
