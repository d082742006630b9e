//! Classes and demand groups: pods that share the same answers (node selection,
//! tolerations, requests), and what a pod of a group costs on a node of its own.

use std::collections::{BTreeSet, HashMap};

use super::key_hash::KeyMap;
use crate::labels;
use crate::model::{AttachedVolume, GpuShare, Snapshot};
use crate::requirements::{Constraint, NodeSelector, Requirements};
use crate::resources::Resources;
use crate::taints::untolerated;

use super::shapes::{Devices, demand, keeps_off_gpu, offering_allowed, term_fits_shape};
use super::slots::ports_conflict;
use super::spread_domains::Pin;
use super::{Class, ClassKey, Planner, ScanKey, Slot, SlotAnswers, SlotKind, VolumeScan};

/// The largest fraction of `alloc` that `need` takes in any resource (only GPU-class ones when
/// `gpu_only`).
pub(super) fn dominant_share(need: &Resources, alloc: &Resources, gpu_only: bool) -> f64 {
    // The four named resources are read as fields, not walked by name: this is asked for
    // every candidate of every claim sized, and none of them is GPU-class.
    let fixed = [
        (need.cpu, alloc.cpu),
        (need.memory, alloc.memory),
        (need.ephemeral_storage, alloc.ephemeral_storage),
        (need.pods, alloc.pods),
    ];
    let extended = need
        .extended
        .iter()
        .filter(|(name, _)| !gpu_only || crate::resources::is_gpu_class(name))
        .map(|(name, amount)| (*amount, alloc.extended.get(name).copied().unwrap_or(0)));
    let fixed = fixed.into_iter().filter(|_| !gpu_only);
    let mut share: f64 = 0.0;
    for (amount, have) in fixed.chain(extended) {
        if amount == 0 {
            continue;
        }
        if have > 0 {
            share = share.max(amount as f64 / have as f64);
        } else if amount > 0 {
            return f64::INFINITY;
        }
    }
    share
}

/// What bars a class's pods from every node of a shape, whatever their selectors say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bar {
    /// A taint of the pool the pods do not tolerate.
    Taint,
    /// The pods take a share of one GPU and the pool offers no fractional shares.
    Sharing,
    /// A DaemonSet on every such node binds one of the pods' host ports.
    HostPort,
    /// The pods ask for more than one replica of a time-sliced GPU, and the pool's device
    /// plugin fails such requests (`failRequestsGreaterThanOne`).
    OneReplica,
}

/// Whether pod `p` asks for more than one of a GPU-class resource: what a time-sliced pool
/// with `failRequestsGreaterThanOne` refuses.
pub(super) fn asks_several_gpus(p: &crate::model::Pod) -> bool {
    p.requests
        .extended
        .iter()
        .any(|(k, v)| *v > 1 && crate::resources::is_gpu_class(k))
}

/// Whether `pool`'s device plugin fails requests for more than one replica (time-slicing
/// with `failRequestsGreaterThanOne`, or MPS).
pub(super) fn one_replica_each(pool: &crate::model::Pool) -> bool {
    pool.sharing
        .time_slicing
        .as_ref()
        .is_some_and(crate::model::TimeSlicing::one_replica_each)
}

/// The first [`Bar`] between pods (`tolerations`, whether they take a GPU `share`, their
/// `host_ports`, whether they ask for `several` of a GPU resource) and the nodes of shape `s`
/// of `pool`; `None` when only their selectors and
/// requests remain to be checked.
pub(super) fn class_bar(
    pool: &crate::model::Pool,
    s: &super::Shape,
    tolerations: &[crate::taints::Toleration],
    share: bool,
    host_ports: &[crate::model::HostPort],
    several: bool,
) -> Option<Bar> {
    if untolerated(tolerations, &pool.taints).is_some() {
        return Some(Bar::Taint);
    }
    // Shares of one device need a pool whose nodes run a sharing device plugin.
    if share && !pool.sharing.fractional {
        return Some(Bar::Sharing);
    }
    if several && one_replica_each(pool) {
        return Some(Bar::OneReplica);
    }
    if ports_conflict(host_ports, s.host_ports.iter().map(|(h, _)| h)) {
        return Some(Bar::HostPort);
    }
    None
}

/// The label keys a node must carry for the pod's hard topology spread constraints: the
/// scheduler filters out a node without the key ("missing required label"), so a node the
/// pod's spread cannot count is no place for it, and planning one would launch a node the pod
/// never binds to (then, once it was removed empty, another). Every node has a hostname, and
/// every node the planner launches a zone and a capacity type: those keys are left out, which
/// keeps the common zone spread free of an extra requirement on every term.
///
/// With each key, what [`Planner::domain_pins`] requires there (`pins`), if anything; a key
/// only a pin names (a capacity type, a pod affinity's key) is listed with its pin.
fn spread_label_keys<'p>(
    p: &'p crate::model::Pod,
    pins: &'p [Pin],
) -> Vec<(&'p str, Option<&'p Constraint>)> {
    let given = |k: &str| k == labels::HOSTNAME || k == labels::ZONE || k == labels::CAPACITY_TYPE;
    let pinned = |k: &str| {
        pins.iter()
            .find(|pin| pin.key == k)
            .map(|pin| &pin.constraint)
    };
    let mut keys: Vec<(&str, Option<&Constraint>)> = p
        .spread
        .iter()
        .filter(|s| s.hard && !given(&s.topology_key))
        .map(|s| (s.topology_key.as_str(), pinned(&s.topology_key)))
        .collect();
    for pin in pins {
        if !keys.iter().any(|(k, _)| *k == pin.key) {
            keys.push((pin.key.as_str(), Some(&pin.constraint)));
        }
    }
    keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
    keys
}

/// A pod's demand-group identity: its class, requests and GPU share.
type DemandKey<'a> = (usize, &'a Resources, &'a Option<GpuShare>);

/// How many pods of the snapshot name each volume: pending ones, those on existing nodes and
/// those on claims in flight (a pod naming a volume twice counts once).
fn volume_names(snap: &Snapshot) -> HashMap<&str, u32> {
    let mut named: HashMap<&str, u32> = HashMap::new();
    let pods = snap
        .pending
        .iter()
        .chain(snap.nodes.iter().flat_map(|n| &n.pods))
        .chain(snap.in_flight.iter().flat_map(|c| &c.pods));
    for p in pods.filter(|p| !p.volumes.is_empty()) {
        let mut ids: Vec<&str> = p.volumes.iter().map(|v| v.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            *named.entry(id).or_default() += 1;
        }
    }
    named
}

/// A pending pod's [`VolumeScan`], given how many pods name each volume.
fn volume_scan<'a>(volumes: &'a [AttachedVolume], named: &HashMap<&str, u32>) -> VolumeScan<'a> {
    if volumes.is_empty() {
        return VolumeScan::None;
    }
    if volumes
        .iter()
        .any(|v| named.get(v.id.as_str()).is_some_and(|n| *n > 1))
    {
        return VolumeScan::Shared;
    }
    let mut ids: Vec<(&str, &str)> = volumes
        .iter()
        .map(|v| (v.driver.as_str(), v.id.as_str()))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut counts: Vec<(&str, u32)> = Vec::new();
    for (driver, _) in ids {
        match counts.last_mut() {
            Some((d, n)) if *d == driver => *n += 1,
            _ => counts.push((driver, 1)),
        }
    }
    VolumeScan::Own(counts)
}

/// `a == b`, without a call to compare the bytes of the (mostly empty) id lists.
fn same_scan_key(a: &ScanKey<'_>, b: &ScanKey<'_>) -> bool {
    fn same(a: &[usize], b: &[usize]) -> bool {
        a.len() == b.len() && (a.is_empty() || a == b)
    }
    a.0 == b.0 && same(a.1, b.1) && same(a.2, b.2) && same(a.3, b.3) && same(a.4, b.4) && a.5 == b.5
}

impl<'a> Planner<'a> {
    pub(super) fn build_classes(&mut self) {
        let mut index: KeyMap<ClassKey<'_>, usize> = KeyMap::default();
        let mut classes = Vec::new();
        let mut class_of = Vec::with_capacity(self.snap.pending.len());
        let mut prev: Option<(ClassKey<'_>, usize)> = None;
        let pins = self.domain_pins();
        let one_replica_pools = self.snap.pools.iter().any(one_replica_each);
        for (i, p) in self.snap.pending.iter().enumerate() {
            let share = p.gpu_share.is_some();
            let key = (
                (&p.node_selector, &p.strict_node_selector),
                &p.tolerations,
                share,
                &p.host_ports,
                &self.dra_keys[i],
                spread_label_keys(p, &pins[i]),
                // Only where some pool refuses several replicas: a split of the class would
                // change how its GPU pods are sized together everywhere else.
                one_replica_pools && asks_several_gpus(p),
            );
            // Pods of a workload come one after another: an identical neighbour spares the
            // hashing of the whole key.
            let known = match &prev {
                Some((k, ci)) if *k == key => Some(*ci),
                _ => index.get(&key).copied(),
            };
            let ci = match known {
                Some(ci) => ci,
                None => {
                    let pinned_terms = |ns: &NodeSelector| {
                        let mut terms = if ns.terms.is_empty() {
                            vec![Requirements::new()]
                        } else {
                            ns.terms.clone()
                        };
                        for (k, pinned) in &key.5 {
                            let c = pinned.cloned().unwrap_or(Constraint {
                                allow_absent: false,
                                ..Constraint::any()
                            });
                            for t in &mut terms {
                                t.add_constraint(k, c.clone());
                            }
                        }
                        terms
                    };
                    let terms = pinned_terms(&p.node_selector);
                    // The zones a zone spread counts come from the pod's own selection.
                    let strict = p.strict_node_selector.as_ref().map(pinned_terms);
                    let zone_terms = strict.as_ref().unwrap_or(&terms);
                    let mut zones = BTreeSet::new();
                    let shape_ok: Vec<bool> = self
                        .shapes
                        .iter()
                        .enumerate()
                        .map(|(si, s)| {
                            let pool = &self.snap.pools[s.pool];
                            if class_bar(pool, s, &p.tolerations, share, &p.host_ports, key.6)
                                .is_some()
                            {
                                return false;
                            }
                            if !self.dra_shape_ok(i, si) {
                                return false;
                            }
                            for t in zone_terms.iter().filter(|t| term_fits_shape(t, s)) {
                                let zc = t.get(labels::ZONE);
                                let cc = t.get(labels::CAPACITY_TYPE);
                                for o in s.offerings.iter().filter(|o| offering_allowed(o, zc, cc))
                                {
                                    zones.insert(o.zone.clone());
                                }
                            }
                            terms.iter().any(|t| term_fits_shape(t, s))
                        })
                        .collect();
                    classes.push(Class {
                        zone_terms: strict,
                        terms,
                        share,
                        host_ports: p.host_ports.clone(),
                        tolerations: p.tolerations.clone(),
                        shape_ok,
                        slot_ok: SlotAnswers::default(),
                        pool_shapes: HashMap::new(),
                        zones,
                        spread_keys: key
                            .5
                            .iter()
                            .filter(|(k, c)| {
                                *k != labels::CAPACITY_TYPE && c.is_none_or(|c| !c.allow_absent)
                            })
                            .map(|(k, _)| k.to_string())
                            .collect(),
                        pins: pins[i].iter().map(Pin::describe).collect(),
                        several: key.6,
                    });
                    index.insert(key.clone(), classes.len() - 1);
                    classes.len() - 1
                }
            };
            class_of.push(ci);
            prev = Some((key, ci));
        }
        // Zones of compatible existing nodes are spread domains too. A cluster has a few
        // zones and thousands of nodes: a zone already known needs no term matched.
        for class in &mut classes {
            for slot in &self.state.slots {
                if let Some(z) = &slot.zone
                    && slot.kind != SlotKind::New
                    && !class.zones.contains(z)
                    && class
                        .zone_terms
                        .as_ref()
                        .unwrap_or(&class.terms)
                        .iter()
                        .any(|t| t.matches(slot.labels(self.snap)))
                {
                    class.zones.insert(z.clone());
                }
            }
        }
        self.classes = classes;
        self.class_of = class_of;
        self.build_groups();
    }

    fn build_groups(&mut self) {
        let pending = &self.snap.pending;
        let mut demand_index: KeyMap<DemandKey<'_>, usize> = KeyMap::default();
        let mut scan_index: KeyMap<ScanKey<'_>, usize> = KeyMap::default();
        let mut prev_demand: Option<(DemandKey<'_>, usize)> = None;
        let mut prev_scan: Option<(ScanKey<'_>, usize)> = None;
        let volume_limited = self.snap.nodes.iter().any(|n| !n.volume_limits.is_empty());
        let named = if volume_limited {
            volume_names(self.snap)
        } else {
            HashMap::new()
        };
        self.shares_volumes = Vec::with_capacity(pending.len());
        for (i, p) in pending.iter().enumerate() {
            // As in `build_classes`: a pod identical to the one before it joins its groups
            // without hashing its keys.
            let volumes = if volume_limited {
                volume_scan(&p.volumes, &named)
            } else {
                VolumeScan::None
            };
            // Pods that differ only in their volumes are one demand group: how many of them
            // are left sizes claims for all of them (a node's attach count caps its own
            // pods through `volume_copies`, per scan group).
            let demand_key = (self.class_of[i], &p.requests, &p.gpu_share);
            let g = match prev_demand {
                Some((k, g)) if k == demand_key => g,
                _ => {
                    let n = demand_index.len();
                    *demand_index.entry(demand_key).or_insert(n)
                }
            };
            prev_demand = Some((demand_key, g));
            self.demand_group.push(g);
            if g == self.remaining.len() {
                self.remaining.push(0);
            }
            self.remaining[g] += 1;
            let attaches = volumes == VolumeScan::Shared;
            self.shares_volumes.push(attaches);
            let key = (
                g,
                self.matches[i].as_slice(),
                self.sel_of_spread[i].as_slice(),
                self.sel_of_affinity[i].as_slice(),
                self.sel_of_anti[i].as_slice(),
                // Pods that attach volumes to limited nodes scan apart by their counts; pods
                // that share a volume are not monotone (below): where one stops must not be
                // where another pod starts.
                volumes,
            );
            let sg = match &prev_scan {
                Some((k, sg)) if same_scan_key(k, &key) => *sg,
                _ => {
                    let n = scan_index.len();
                    *scan_index.entry(key.clone()).or_insert(n)
                }
            };
            prev_scan = Some((key, sg));
            self.scan_group.push(sg);
            self.monotone.push(
                !self.dra_shared(i)
                    // A node one refused at its volume limit may still take another whose
                    // shared volume is there already.
                    && !attaches
                    && p.affinity.is_empty()
                    && !p
                        .spread
                        .iter()
                        .any(|t| t.hard && t.topology_key != labels::HOSTNAME),
            );
        }
        self.unit_cost = vec![None; self.remaining.len()];
        let w = self.fit_index.width();
        self.class_left = vec![0; self.classes.len() * w];
        for (i, p) in pending.iter().enumerate() {
            let ci = self.class_of[i];
            let row = &mut self.class_left[ci * w..(ci + 1) * w];
            self.fit_index
                .add_to(row, &demand(p, &Devices::default()), i64::saturating_add);
        }
        self.unit_cost_capped = vec![None; scan_index.len()];
        self.scan_from = vec![0; scan_index.len()];
        self.deferred_scan = vec![false; scan_index.len()];
        self.verdicts = vec![Vec::new(); scan_index.len()];
        self.summaries = vec![Vec::new(); scan_index.len()];
    }

    /// The lowest hourly cost per pod of demand group `g` on a node of its own kind: over the
    /// shapes pod `i` (a member) can use, price / how many members one node holds, capped by
    /// the members still pending (so the last members of a group are measured by the node
    /// they would fill, not by a full node's price per pod, and do not refuse a claim sized
    /// for them). The shapes are read once per group ([`UnitCosts`]); each call is a lookup.
    ///
    /// A pod whose own volumes a known attach count bounds ([`Self::volume_copies`]) gets the
    /// table of its scan group, which holds its volume counts; its demand group's members
    /// without volumes keep theirs.
    pub(super) fn unit_cost(&mut self, i: usize, avoid_gpu: bool) -> f64 {
        let g = self.demand_group[i];
        let left = self.remaining[g].max(1) as f64;
        let capped = self.volume_capped(i);
        let at = if capped { self.scan_group[i] } else { g };
        let known = if capped {
            self.unit_cost_capped[at].is_some()
        } else {
            self.unit_cost[at].is_some()
        };
        if !known {
            let table = Some(self.unit_costs(i, avoid_gpu));
            if capped {
                self.unit_cost_capped[at] = table;
            } else {
                self.unit_cost[at] = table;
            }
        }
        let table = if capped {
            &self.unit_cost_capped[at]
        } else {
            &self.unit_cost[at]
        };
        table.as_ref().map_or(f64::INFINITY, |t| t.at(left))
    }

    fn unit_costs(&self, i: usize, avoid_gpu: bool) -> UnitCosts {
        let pod = &self.snap.pending[i];
        let need = demand(pod, &Devices::default());
        let class = &self.classes[self.class_of[i]];
        let mut per_shape: Vec<(f64, f64)> = Vec::new();
        for (si, shape) in self.shapes.iter().enumerate() {
            if !class.shape_ok[si] || (avoid_gpu && shape.has_gpu) || !need.fits(&shape.allocatable)
            {
                continue;
            }
            let mut per_node = (1.0 / dominant_share(&need, &shape.allocatable, false))
                .floor()
                .max(1.0);
            if let Some(k) = self.dra_copies(i, si) {
                per_node = per_node.min(k);
            }
            match self.volume_copies(i, si) {
                // Its nodes cannot attach even one such pod.
                Some(k) if k < 1.0 => continue,
                Some(k) => per_node = per_node.min(k),
                None => {}
            }
            // Priced under the class's own zone and capacity type: a pod that may only run
            // on demand measured against the type's spot price found every claim's share of
            // an on-demand node too dear, and took a node of its own each time.
            let Some(price) = class
                .terms
                .iter()
                .filter(|t| term_fits_shape(t, shape))
                .filter_map(|t| shape.price_under(t))
                .min_by(f64::total_cmp)
            else {
                continue;
            };
            per_shape.push((per_node, price));
        }
        UnitCosts::new(per_shape)
    }

    /// The pod's share of a claim's target price: its dominant share of the target type,
    /// counting only GPU-class resources on GPU types (cpu left over on a GPU node is not what
    /// that node is bought for).
    pub(super) fn fair_share(&self, i: usize, slot: &Slot) -> f64 {
        let Some(t) = slot.target_shape else {
            return 0.0;
        };
        let shape = &self.shapes[t];
        let need = demand(&self.snap.pending[i], &slot.devices);
        let share = dominant_share(&need, &shape.allocatable, shape.has_gpu);
        // A pod whose GPUs come through claims takes its part of the devices.
        match self.dra_copies(i, t) {
            Some(k) if shape.has_gpu => slot.target * share.max(1.0 / k),
            _ => slot.target * share,
        }
    }

    /// Whether pod `i` needs no GPU and some GPU-less shape could host it alone: then GPU
    /// instance types are not used for it.
    pub(super) fn avoid_gpu(&self, i: usize) -> bool {
        if !self.any_gpu_shape {
            return false;
        }
        let need = demand(&self.snap.pending[i], &Devices::default());
        let class = &self.classes[self.class_of[i]];
        keeps_off_gpu(&need, &self.shapes, |s| class.shape_ok[s])
    }
}

/// A demand group's cost per pod on nodes of its own, as a function of how many members are
/// left: `min over shapes of price / min(per node, left)`. Shapes holding at most `left`
/// members cost their full-node price per pod; the others are priced for `left` pods, so
/// only the cheapest of them counts.
#[derive(Clone, Debug)]
pub(super) struct UnitCosts {
    /// Members one node holds, ascending.
    per_node: Vec<f64>,
    /// `prefix[k]`: the lowest price per pod among the first `k + 1` shapes.
    prefix: Vec<f64>,
    /// `suffix[k]`: the lowest node price among shapes `k..`.
    suffix: Vec<f64>,
}

impl UnitCosts {
    fn new(mut shapes: Vec<(f64, f64)>) -> Self {
        shapes.sort_by(|a, b| a.0.total_cmp(&b.0));
        let per_node = shapes.iter().map(|s| s.0).collect();
        let mut prefix = Vec::with_capacity(shapes.len());
        let mut low = f64::INFINITY;
        for (n, price) in &shapes {
            low = low.min(price / n);
            prefix.push(low);
        }
        let mut suffix = vec![f64::INFINITY; shapes.len()];
        let mut low = f64::INFINITY;
        for (k, (_, price)) in shapes.iter().enumerate().rev() {
            low = low.min(*price);
            suffix[k] = low;
        }
        UnitCosts {
            per_node,
            prefix,
            suffix,
        }
    }

    /// The cost per pod with `left` members pending (infinite when no shape holds one).
    fn at(&self, left: f64) -> f64 {
        let k = self.per_node.partition_point(|n| *n <= left);
        let full = if k > 0 {
            self.prefix[k - 1]
        } else {
            f64::INFINITY
        };
        let partial = self.suffix.get(k).map_or(f64::INFINITY, |p| p / left);
        full.min(partial)
    }
}

#[cfg(test)]
mod tests {
    use super::{UnitCosts, VolumeScan, volume_names, volume_scan};
    use crate::builders::{itype, node, pod};
    use crate::model::Snapshot;

    #[test]
    fn a_pod_whose_volumes_no_other_pod_names_scans_by_its_counts() {
        let t = itype("m5.large").cpu("2").mem("8Gi").build();
        let snap = Snapshot {
            pending: vec![
                pod("a")
                    .volume("ebs", "ns/a-1")
                    .volume("efs", "ns/shared")
                    .volume("ebs", "ns/a-2")
                    .volume("ebs", "ns/a-1")
                    .build(),
                pod("b").volume("efs", "ns/b").volume("ebs", "ns/b").build(),
                pod("c").volume("ebs", "ns/on-node").build(),
                pod("d").volume("efs", "ns/shared").build(),
                pod("plain").build(),
            ],
            nodes: vec![
                node("n", &t, "z1")
                    .with_pod(pod("running").volume("ebs", "ns/on-node"))
                    .build(),
            ],
            ..Snapshot::default()
        };
        let named = volume_names(&snap);
        let scan = |i: usize| volume_scan(&snap.pending[i].volumes, &named);
        // `a` names `ns/a-1` twice and shares `ns/shared` with `d`.
        assert_eq!(named.get("ns/a-1"), Some(&1));
        assert_eq!(scan(0), VolumeScan::Shared);
        // Counts per driver, sorted by driver, whatever order the volumes come in.
        assert_eq!(scan(1), VolumeScan::Own(vec![("ebs", 1), ("efs", 1)]));
        // A volume a running pod uses is shared too.
        assert_eq!(scan(2), VolumeScan::Shared);
        assert_eq!(scan(3), VolumeScan::Shared);
        assert_eq!(scan(4), VolumeScan::None);
        let own = Snapshot {
            pending: vec![
                pod("x")
                    .volume("ebs", "ns/x-1")
                    .volume("ebs", "ns/x-2")
                    .volume("ebs", "ns/x-1")
                    .build(),
            ],
            ..Snapshot::default()
        };
        let named = volume_names(&own);
        assert_eq!(
            volume_scan(&own.pending[0].volumes, &named),
            VolumeScan::Own(vec![("ebs", 2)]),
            "a volume named twice by one pod attaches once"
        );
    }

    /// The lookup agrees with the definition, `min over shapes of price / min(per node,
    /// left)`, for every count of members left, on shapes whose cheapest choice changes
    /// with the count (and one a pod fills alone, and one no member's size divides).
    #[test]
    fn unit_costs_agree_with_the_definition() {
        let shapes = vec![
            (1.0, 0.9),
            (4.0, 2.0),
            (16.0, 6.0),
            (3.0, 1.8),
            (64.0, 30.0),
            (f64::INFINITY, 40.0),
        ];
        let table = UnitCosts::new(shapes.clone());
        for left in 1..=100 {
            let left = f64::from(left);
            let want = shapes
                .iter()
                .map(|(n, p)| p / n.min(left))
                .fold(f64::INFINITY, f64::min);
            let got = table.at(left);
            assert!(
                (got - want).abs() < 1e-12,
                "left {left}: {got} against {want}"
            );
        }
        assert_eq!(UnitCosts::new(Vec::new()).at(3.0), f64::INFINITY);
    }
}
