//! Slots: the places a pod can go (existing nodes, in-flight claims, new claims), built
//! once per plan and scanned for each pod.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::labels;
use crate::model::{HostPort, Snapshot};
use crate::requirements::{Constraint, Labels, Requirements};
use crate::resources::{Resources, is_gpu_class, names};
use crate::taints::{Effect, Taint, Toleration, untolerated};

use super::key_hash::KeyMap;
use super::shapes::{Devices, Shape, demand, key_fits_shape, may_select};
use super::slot_answers::Answer;
use super::{Grow, Planner, PoolUse, Slot, SlotKind, Verdict};

impl Slot {
    /// An open new-claim slot with nothing in it, `counts` as given.
    pub(super) fn empty(counts: Vec<u32>) -> Slot {
        Slot {
            kind: SlotKind::New,
            name: String::new(),
            pool: None,
            labels: Labels::new(),
            taints: vec![],
            own_taints: false,
            allocatable: Resources::new(),
            used: Resources::new(),
            devices: Devices::default(),
            reqs: Requirements::new(),
            candidates: vec![],
            price: 0.0,
            target: 0.0,
            target_shape: None,
            zone: None,
            pods: vec![],
            counts,
            blocks: vec![],
            sel_blocks: vec![],
            ports: vec![],
            volumes: None,
            reserved: Resources::new(),
            reserved_models: BTreeMap::new(),
            reserved_cluster: Vec::new(),
            open: true,
            stamp: 0,
            dra_taken: vec![],
            dra_claims: vec![],
            min_values_relaxed: BTreeMap::new(),
            warm: false,
        }
    }
}

impl Slot {
    /// The slot's name: an existing node's own (not copied for every plan), a claim's.
    pub(super) fn name<'s>(&'s self, snap: &'s Snapshot) -> &'s str {
        match self.kind {
            SlotKind::Existing(ni) => &snap.nodes[ni].name,
            _ => &self.name,
        }
    }

    /// The labels a pod's node selector sees here: an existing node's own, an in-flight
    /// claim's shared ones (empty for a new claim).
    pub(super) fn labels<'s>(&'s self, snap: &'s Snapshot) -> &'s Labels {
        match self.kind {
            SlotKind::Existing(ni) => &snap.nodes[ni].labels,
            _ => &self.labels,
        }
    }

    /// The slot's taints: an existing node's own (not copied for every plan), a claim's pool's.
    pub(super) fn taints<'s>(&'s self, snap: &'s Snapshot) -> &'s [Taint] {
        match self.kind {
            SlotKind::Existing(ni) if !self.own_taints => &snap.nodes[ni].taints,
            _ => &self.taints,
        }
    }

    /// What the slot offers: an existing node's allocatable (not copied for every plan), an
    /// in-flight claim's least candidate's, a new claim's most any candidate offers.
    pub(super) fn allocatable<'s>(&'s self, snap: &'s Snapshot) -> &'s Resources {
        match self.kind {
            SlotKind::Existing(ni) => &snap.nodes[ni].allocatable,
            _ => &self.allocatable,
        }
    }
}

/// A cheap necessary condition for `req` (without shares) fitting into `alloc - used`, with no
/// allocation: most slots fail it.
fn quick_fit(req: &Resources, alloc: &Resources, used: &Resources) -> bool {
    req.cpu + used.cpu <= alloc.cpu
        && req.memory + used.memory <= alloc.memory
        && req.pods + used.pods <= alloc.pods
        && req
            .extended
            .iter()
            // Keys here are extended ones by construction, so the map is read directly rather
            // than through `get`'s comparisons against the four named resources.
            .all(|(k, v)| {
                v + used.extended.get(k).copied().unwrap_or(0)
                    <= alloc.extended.get(k).copied().unwrap_or(0)
            })
}

/// Columns of a [`FitIndex`] row before the extended resources: cpu, memory, ephemeral
/// storage, pods.
const BASE: usize = 4;

/// Most columns a [`Need`] keeps on the stack; a plan whose pods ask for more extended
/// resources than that sums them by [`Resources::sum`] instead.
const NEED_COLS: usize = 16;

/// The amounts a new claim's fit checks read, in numbered columns: cpu, memory, ephemeral
/// storage, pods, then each extended resource a pending pod's demand may hold (those its
/// requests name and its GPU share's), by name; so every resource a new claim's pods use has
/// one. A claim's row ([`State::fit_rows`]) holds what it offers and, beside it, what its pods
/// use; each shape has a row of what it offers. The walk over open claims for every pod reads
/// a few cache lines per claim that way, rather than the claim and maps keyed by strings (most
/// of the walk's cache misses), and a claim's candidates are held against a pod without a map
/// lookup each.
///
/// [`State::fit_rows`]: super::State
#[derive(Clone)]
pub(super) struct FitIndex {
    /// Extended resource names, sorted: columns [`BASE`] and on.
    names: Vec<String>,
    /// Per pending pod: its range in `asks`.
    ranges: Vec<(u32, u32)>,
    /// Per pending pod (see `ranges`): the column and amount of each extended resource it
    /// requests.
    asks: Vec<(u32, i64)>,
    /// Per shape, [`Self::width`] columns: its allocatable.
    shape_rows: Vec<i64>,
}

impl FitIndex {
    pub(super) fn new(snap: &Snapshot, shapes: &[Shape]) -> FitIndex {
        let requested = snap.pending.iter().flat_map(|p| p.requests.extended.keys());
        let shared = snap
            .pending
            .iter()
            .filter_map(|p| p.gpu_share.as_ref().map(|s| &s.resource));
        let names: Vec<String> = requested
            .chain(shared)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .cloned()
            .collect();
        let mut ranges = Vec::with_capacity(snap.pending.len());
        let mut asks = Vec::new();
        for p in &snap.pending {
            let from = asks.len() as u32;
            for (k, v) in &p.requests.extended {
                // Every name is there: `names` was gathered from these very maps.
                let col = names.binary_search(k).map_or(0, |c| c + BASE);
                asks.push((col as u32, *v));
            }
            ranges.push((from, asks.len() as u32));
        }
        let mut index = FitIndex {
            names,
            ranges,
            asks,
            shape_rows: Vec::new(),
        };
        let w = index.width();
        let mut rows = vec![0; shapes.len() * w];
        for (row, s) in rows.chunks_exact_mut(w).zip(shapes) {
            index.put(row, &s.allocatable);
        }
        index.shape_rows = rows;
        index
    }

    /// Columns of one set of amounts.
    pub(super) fn width(&self) -> usize {
        BASE + self.names.len()
    }

    /// Length of a claim's row: what it offers, then what its pods use.
    pub(super) fn stride(&self) -> usize {
        2 * self.width()
    }

    /// `r` in columns, an absent amount as 0 (as [`quick_fit`] and [`Resources::sum`] read it).
    fn put(&self, cols: &mut [i64], r: &Resources) {
        cols[..BASE].copy_from_slice(&[r.cpu, r.memory, r.ephemeral_storage, r.pods]);
        for (cell, name) in cols[BASE..].iter_mut().zip(&self.names) {
            *cell = r.extended.get(name).copied().unwrap_or(0);
        }
    }

    /// Fills a claim's `row` ([`Self::stride`] long) with `alloc` and `used`.
    pub(super) fn fill(&self, row: &mut [i64], alloc: &Resources, used: &Resources) {
        // A claim's pods are pending pods, whose demand has a column for every resource.
        debug_assert!(
            used.extended
                .keys()
                .all(|k| self.names.binary_search(k).is_ok())
        );
        let (offers, uses) = row.split_at_mut(self.width());
        self.put(offers, alloc);
        self.put(uses, used);
    }

    /// What a claim whose row is `row` offers.
    pub(super) fn offers<'r>(&self, row: &'r [i64]) -> &'r [i64] {
        &row[..self.width()]
    }

    /// Combines each amount of `r` into its column of `cols` with `f` (an absent amount
    /// leaves its column alone). `r` is a pending pod's demand, or a sum of them, whose every
    /// resource has a column.
    pub(super) fn add_to(&self, cols: &mut [i64], r: &Resources, f: impl Fn(i64, i64) -> i64) {
        for (c, v) in [r.cpu, r.memory, r.ephemeral_storage, r.pods]
            .into_iter()
            .enumerate()
        {
            cols[c] = f(cols[c], v);
        }
        for (k, v) in &r.extended {
            let found = self.names.binary_search(k);
            debug_assert!(found.is_ok(), "{k} has no column");
            if let Ok(c) = found {
                cols[BASE + c] = f(cols[BASE + c], *v);
            }
        }
    }

    /// How many nodes of shape `c` the demand in columns `need` would take if it could be
    /// split freely: its largest ratio over the resources the shape has (those it lacks are
    /// someone else's concern).
    pub(super) fn even_spread(&self, need: &[i64], c: usize) -> f64 {
        need.iter()
            .zip(self.shape_row(c))
            .filter(|(_, have)| **have > 0)
            .map(|(amount, have)| *amount as f64 / *have as f64)
            .fold(0.0, f64::max)
    }

    /// What shape `c` offers.
    pub(super) fn shape_row(&self, c: usize) -> &[i64] {
        let w = self.width();
        &self.shape_rows[c * w..(c + 1) * w]
    }

    /// [`quick_fit`] of pending pod `i` (whose requests are `req`) on the claim whose row is
    /// `row`: the same sums and comparisons, read from the row.
    pub(super) fn fits(&self, i: usize, req: &Resources, row: &[i64]) -> bool {
        let (offers, uses) = row.split_at(self.width());
        let (from, to) = self.ranges[i];
        req.cpu + uses[0] <= offers[0]
            && req.memory + uses[1] <= offers[1]
            && req.pods + uses[3] <= offers[3]
            && self.asks[from as usize..to as usize]
                .iter()
                .all(|&(c, v)| v + uses[c as usize] <= offers[c as usize])
    }

    /// `used.sum(add)` on the claim whose row is `row` (with `used` its pods' use): in
    /// columns when they fit on the stack. `add` is pending pod `i`'s demand, which is its
    /// requests unless its share opens a device.
    pub(super) fn need<'r>(
        &self,
        i: usize,
        requests: &Resources,
        row: &[i64],
        used: &'r Resources,
        add: &'r Resources,
    ) -> Need<'r> {
        let w = self.width();
        if w > NEED_COLS {
            return Need::Sum(used.sum(add));
        }
        // As `Resources::sum`: saturating, and an amount of 0 is as good as absent (every
        // check below passes it).
        let mut cols = [0; NEED_COLS];
        cols[..w].copy_from_slice(&row[w..]);
        for (c, v) in [add.cpu, add.memory, add.ephemeral_storage, add.pods]
            .into_iter()
            .enumerate()
        {
            cols[c] = cols[c].saturating_add(v);
        }
        if std::ptr::eq(add, requests) {
            let (from, to) = self.ranges[i];
            for &(c, v) in &self.asks[from as usize..to as usize] {
                cols[c as usize] = cols[c as usize].saturating_add(v);
            }
        } else {
            for (k, v) in &add.extended {
                let Ok(c) = self.names.binary_search(k) else {
                    return Need::Sum(used.sum(add));
                };
                cols[BASE + c] = cols[BASE + c].saturating_add(*v);
            }
        }
        Need::Row(cols)
    }
}

/// What a claim's pods would use with one more: [`FitIndex::need`].
pub(super) enum Need<'r> {
    /// In [`FitIndex`] columns.
    Row([i64; NEED_COLS]),
    /// More columns than a row keeps.
    Sum(crate::resources::Sum<'r>),
}

impl Need<'_> {
    /// [`crate::resources::Sum::fits`] in `available`, whose columns are `offers`.
    pub(super) fn fits(&self, offers: &[i64], available: &Resources) -> bool {
        match self {
            Need::Row(n) => {
                n[0] <= offers[0]
                    && n[1] <= offers[1]
                    && (n[2] <= offers[2] || n[2] <= 0)
                    && n[3] <= offers[3]
                    && n[BASE..offers.len()]
                        .iter()
                        .zip(&offers[BASE..])
                        .all(|(n, o)| *n == 0 || n <= o)
            }
            Need::Sum(s) => s.fits(available),
        }
    }
}

/// Whether the candidates of a claim with requirements `claim` must be asked about key `k`
/// of a pod's term (constraint `c`) once the term narrows the claim: not when the claim has
/// the same constraint with no integer bounds (its candidates were kept for it), nor, for a
/// class of one term (`one_term`), when the claim has none, as the class's shape check
/// (`Class::shape_ok`, which [`Planner::usable`] asks first) passed every candidate with the
/// term. A claim's candidate lists run to hundreds of types; asking each about keys that
/// cannot fail was a tenth of planning 50,000 GPU pods.
pub(super) fn asks_key(claim: &Requirements, k: &str, c: &Constraint, one_term: bool) -> bool {
    match claim.get(k) {
        Some(cur) => !(cur == c && c.gt.is_none() && c.lt.is_none()),
        None => !one_term,
    }
}

/// Whether any of `wanted` conflicts with a port already bound (`bound`).
pub(super) fn ports_conflict<'a>(
    wanted: &[HostPort],
    mut bound: impl Iterator<Item = &'a HostPort>,
) -> bool {
    !wanted.is_empty() && bound.any(|b| wanted.iter().any(|w| w.conflicts(b)))
}

/// Whether `taints` hold a `PreferNoSchedule` taint that `tolerations` do not tolerate.
fn prefers_not(tolerations: &[Toleration], taints: &[Taint]) -> bool {
    taints.iter().any(|t| {
        t.effect == Effect::PreferNoSchedule && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

/// The GPU model of instance type `name` in pool `pi`'s catalog, if it has GPUs.
fn node_model<'s>(snap: &'s Snapshot, pi: usize, name: &str) -> Option<&'s str> {
    snap.pools[pi]
        .instance_types
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| t.gpu.as_ref().map(|g| g.model.as_str()))
}

pub(super) fn placeholder() -> Slot {
    Slot {
        open: false,
        ..Slot::empty(vec![])
    }
}

impl<'a> Planner<'a> {
    pub(super) fn build_slots(&mut self) {
        let snap = self.snap;
        let in_flight_names: BTreeSet<&str> =
            snap.in_flight.iter().map(|c| c.name.as_str()).collect();
        let mut slots = Vec::with_capacity(snap.nodes.len() + snap.in_flight.len());
        let mut zone_counts = HashMap::new();
        let mut zone_blocks = Vec::new();
        let mut usage = vec![PoolUse::default(); snap.pools.len()];
        // Both maps are asked once per node at every plan, with short keys: a cheaper hash
        // than the default's pays off on clusters of thousands of nodes.
        let pool_idx: KeyMap<&str, usize> = snap
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        self.learn_volume_limits(&pool_idx);
        let mut models: KeyMap<(usize, &str), Option<&str>> = KeyMap::default();
        let mut node_order: Vec<usize> = (0..snap.nodes.len()).collect();
        // Healthy nodes first, then by name: a pod takes room on a node that is up before room
        // on one still starting or not ready (as Karpenter orders existing nodes), which matters
        // to disruption, whose evicted pods may go only to the first kind.
        node_order.sort_by_key(|i| {
            let n = &snap.nodes[*i];
            (!(n.initialized && n.ready), n.name.as_str())
        });
        let counted_as_claim = |n: &crate::model::Node| {
            !n.initialized
                && n.claim
                    .as_deref()
                    .is_some_and(|c| in_flight_names.contains(c))
        };
        let mut cluster = crate::quota::usage_of_nodes(
            &snap.cluster_limits,
            &snap.pools,
            snap.nodes.iter().filter(|n| !counted_as_claim(n)),
        );
        for ni in node_order {
            let n = &snap.nodes[ni];
            let pool = n.pool.as_deref().and_then(|p| pool_idx.get(p).copied());
            if counted_as_claim(n) {
                continue;
            }
            if let Some(pi) = pool {
                let u = &mut usage[pi];
                u.nodes += 1;
                // Limits count the node's full capacity; allocatable is the best measure we have.
                u.resources.add(&n.allocatable);
                let model = match n.instance_type.as_deref() {
                    // Nodes share a handful of types: each is looked up in its pool once.
                    Some(t) => *models
                        .entry((pi, t))
                        .or_insert_with(|| node_model(snap, pi, t)),
                    None => None,
                };
                if let Some(m) = model {
                    let g = n
                        .labels
                        .get(labels::GPU_COUNT)
                        .and_then(|c| c.parse::<i64>().ok())
                        .unwrap_or(0);
                    match u.models.get_mut(m) {
                        Some(v) => *v += g,
                        None => {
                            u.models.insert(m.to_string(), g);
                        }
                    }
                }
            }
            let mut slot = Slot {
                kind: SlotKind::Existing(ni),
                pool,
                // Read from the node in place (`Slot::labels`): a copy per node per plan
                // was a tenth of a simulated run.
                labels: Labels::new(),
                price: n.price.unwrap_or(0.0),
                zone: n.labels.get(labels::ZONE).cloned(),
                open: !(n.unschedulable || n.going()),
                volumes: super::volume_limits::VolumeRoom::new(&n.volume_limits),
                ..Slot::empty(vec![0; self.nsel()])
            };
            let ephemeral = |t: &Taint| {
                t.effect == Effect::NoSchedule
                    && crate::keys::EPHEMERAL_TAINTS.contains(&t.key.as_str())
            };
            if n.taints.iter().any(ephemeral) {
                slot.taints = n.taints.iter().filter(|t| !ephemeral(t)).cloned().collect();
                slot.own_taints = true;
            }
            for p in &n.pods {
                let d = demand(p, &slot.devices);
                slot.used.add(&d);
                if let Some(s) = &p.gpu_share {
                    slot.devices.take(s);
                }
                self.count_pod_into(&mut slot, &mut zone_counts, &mut zone_blocks, p, None);
            }
            slots.push(slot);
        }
        let mut claims: Vec<usize> = (0..snap.in_flight.len()).collect();
        claims.sort_by(|a, b| snap.in_flight[*a].name.cmp(&snap.in_flight[*b].name));
        let mut claims_built = 0;
        for ci in claims {
            let c = &snap.in_flight[ci];
            let Some(&pi) = pool_idx.get(c.pool.as_str()) else {
                continue;
            };
            let shape_ids: Vec<usize> = (0..self.shapes.len())
                .filter(|&s| {
                    let s = &self.shapes[s];
                    s.pool == pi && c.instance_types.iter().any(|t| *t == *s.name)
                })
                .collect();
            let shapes: Vec<&Shape> = shape_ids.iter().map(|&s| &self.shapes[s]).collect();
            let Some(first) = shapes.first() else {
                continue;
            };
            // Conservative: the claim may become any of its candidates, so count on the least.
            let mut alloc = first.allocatable.clone();
            let mut cap = first.capacity.clone();
            let mut common = first.labels.clone();
            for s in &shapes[1..] {
                alloc = alloc.min(&s.allocatable);
                cap = cap.max(&s.capacity);
                common.retain(|k, v| s.labels.get(k) == Some(v));
            }
            let zone = c
                .requirements
                .get(labels::ZONE)
                .and_then(|z| z.single_value())
                .map(str::to_string);
            if let Some(z) = &zone {
                common.insert(labels::ZONE.into(), z.clone());
            }
            if let Some(ct) = c
                .requirements
                .get(labels::CAPACITY_TYPE)
                .and_then(|z| z.single_value())
            {
                common.insert(labels::CAPACITY_TYPE.into(), ct.to_string());
            }
            // A label its pool defines, pinned to one value, is on the node too (a topology
            // spread over it counts the claim's pods there).
            for (k, _) in first.pool_defined.iter() {
                if let Some(v) = c.requirements.get(k).and_then(|r| r.single_value()) {
                    common.insert(k.to_string(), v.to_string());
                }
            }
            let u = &mut usage[pi];
            u.nodes += 1;
            u.resources.add(&cap);
            for s in &shapes {
                if let (n, Some(m)) = &s.gpus {
                    let e = u.models.entry(m.clone()).or_default();
                    *e = (*e).max(i64::from(*n));
                }
            }
            // Against cluster-wide limits it counts as the largest candidate that may become
            // a node they select.
            for (li, limit) in snap.cluster_limits.iter().enumerate() {
                let most = shapes
                    .iter()
                    .filter(|s| may_select(limit, s, &c.requirements))
                    .map(|s| s.usage())
                    .reduce(|a, b| a.max(&b));
                if let Some(most) = most {
                    cluster[li].add(&most);
                }
            }
            // Its DaemonSets' ports, whichever candidate it becomes.
            let mut ports: Vec<HostPort> = shapes
                .iter()
                .flat_map(|s| s.host_ports.iter().map(|(p, _)| p.clone()))
                .collect();
            ports.sort();
            ports.dedup();
            let mut slot = Slot {
                kind: SlotKind::InFlight(ci),
                ports,
                name: c.name.clone(),
                pool: Some(pi),
                labels: common,
                taints: snap.pools[pi].taints.clone(),
                allocatable: alloc,
                reqs: c.requirements.clone(),
                zone,
                // Its node has no CSINode yet: it attaches what nodes of its candidates showed,
                // as a new claim of the plan would (a pod planned onto a claim last round must
                // not take a place the claim's node will refuse).
                volumes: self.claim_volume_room(&shape_ids),
                ..Slot::empty(vec![0; self.nsel()])
            };
            for p in &c.pods {
                let d = demand(p, &slot.devices);
                slot.used.add(&d);
                if let Some(s) = &p.gpu_share {
                    slot.devices.take(s);
                }
                self.count_pod_into(&mut slot, &mut zone_counts, &mut zone_blocks, p, None);
            }
            slots.push(slot);
            claims_built += 1;
        }
        // Pods take the first fixed slot that fits, so the claims' order decides which pods
        // are left for new claims. By least room first (then age, then name) rather than by
        // name alone: the outcome no longer depends on random claim names (two runs of one
        // workload, or the controller and the simulator, pack alike), and a pod takes the
        // tightest claim that holds it.
        let first_claim = slots.len() - claims_built;
        slots[first_claim..].sort_by_cached_key(|s| {
            let room = s.allocatable(snap).minus(&s.used);
            let gpus: i64 = room
                .iter()
                .filter(|(k, _)| is_gpu_class(k))
                .map(|(_, v)| v)
                .sum();
            let created = match s.kind {
                SlotKind::InFlight(ci) => snap.in_flight[ci].created_at,
                _ => 0,
            };
            (
                gpus,
                room.get(names::CPU),
                room.get(names::MEMORY),
                created,
                s.name.clone(),
            )
        });
        self.state.fixed = slots.len();
        self.state.slots = slots;
        self.state.zone_counts = zone_counts;
        self.state.zone_blocks = zone_blocks;
        self.state.usage = usage;
        self.state.cluster = cluster;
    }

    /// The first existing node or in-flight claim from slot `start` on that takes pod `i`.
    pub(super) fn scan_fixed(&mut self, i: usize, start: usize) -> Option<usize> {
        (start..self.state.fixed).find(|&si| self.fits_fixed(i, si))
    }

    /// Whether existing node or in-flight claim `si` takes pod `i` (false for a new claim).
    pub(super) fn fits_fixed(&mut self, i: usize, si: usize) -> bool {
        let pod = &self.snap.pending[i];
        let ci = self.class_of[i];
        let slot = &self.state.slots[si];
        slot.open
            && slot.kind != SlotKind::New
            && quick_fit(&pod.requests, slot.allocatable(self.snap), &slot.used)
            && !self.avoids(ci, slot.taints(self.snap))
            && demand(pod, &slot.devices).fits(&slot.allocatable(self.snap).minus(&slot.used))
            && slot.volumes.as_ref().is_none_or(|r| r.admits(&pod.volumes))
            && self.slot_compatible(ci, si)
            && self.topology_ok_fixed(i, si)
            && self.dra_fits_fixed(i, si)
    }

    /// What new claim `si` means for pod `i` in step 2 of [`Self::place_inner`], with what
    /// the claim would become when the pod can join it.
    pub(super) fn verdict(
        &mut self,
        i: usize,
        si: usize,
        avoid_gpu: bool,
        own: &mut Option<f64>,
    ) -> (Verdict, Option<Grow>) {
        // The class check is a remembered answer, so it goes first.
        if !self.new_slot_may_fit(self.class_of[i], si) {
            return (Verdict::No, None);
        }
        let pod = &self.snap.pending[i];
        if let Some(room) = &self.state.slots[si].volumes
            && !room.admits(&pod.volumes)
        {
            return (Verdict::No, None);
        }
        // The claim's row, not the claim: many claims fail here (see `FitIndex`).
        let fits = self.fit_index.fits(i, &pod.requests, self.fit_row(si));
        debug_assert_eq!(
            fits,
            quick_fit(
                &pod.requests,
                self.state.slots[si].allocatable(self.snap),
                &self.state.slots[si].used
            )
        );
        if !fits {
            return (Verdict::No, None);
        }
        let Some((price, grow)) = self.join_price(i, si, avoid_gpu) else {
            return (Verdict::No, None);
        };
        let slot = &self.state.slots[si];
        let delta = price - slot.target.max(slot.price);
        if delta > 1e-12 {
            return (Verdict::Grow(delta), grow);
        }
        // Worked out once per pod, and only for a pod that fits somewhere below the price.
        let own = *own.get_or_insert_with(|| self.unit_cost(i, avoid_gpu));
        let slot = &self.state.slots[si];
        let paid = price <= slot.price + 1e-12;
        // Room already paid for on a node without GPUs costs nothing once no pod of the
        // claim's own kinds is left to want it (Karpenter's "should pack small and large pods
        // together": the small pods fill what the large ones left); until then, and on GPU
        // nodes, whose room other GPU pods of the plan may want, the pod must be worth its
        // share.
        let gpu_node = slot.target_shape.is_some_and(|t| self.shapes[t].has_gpu);
        let v = if self.fair_share(i, slot) <= own * (1.0 + 1e-9) + 1e-12
            || (paid
                && !gpu_node
                && slot
                    .pods
                    .iter()
                    .all(|&p| self.remaining[self.demand_group[p]] == 0))
        {
            Verdict::Join { free: paid }
        } else {
            // Fits for free, but the pod would take more of the claim than it is worth.
            Verdict::Grow(0.0)
        };
        (v, grow)
    }

    /// Whether candidate `c` of new claim `si` would hold pod `i` (`need` being what the
    /// claim's pods would use with it): [`Self::try_new_slot`]'s test of each candidate.
    pub(super) fn usable(
        &self,
        i: usize,
        si: usize,
        c: usize,
        avoid_gpu: bool,
        need: &Need,
    ) -> bool {
        self.classes[self.class_of[i]].shape_ok[c]
            && !(avoid_gpu && self.shapes[c].has_gpu)
            && need.fits(self.fit_index.shape_row(c), &self.shapes[c].allocatable)
            && self.dra_fits_new(Some(i), si, c)
    }

    /// The price new claim `si` would have with pod `i` ([`Self::try_new_slot`]'s), with the
    /// claim's grown form when working the price out built it anyway. A verdict needs only the
    /// price, and most verdicts are never taken: for a pod whose node selection narrows the
    /// claim (the loop over its class's terms), the narrowed requirements and candidate list
    /// are left to the claim the pod goes to, which [`Self::place_inner`] works out again.
    fn join_price(&self, i: usize, si: usize, avoid_gpu: bool) -> Option<(f64, Option<Grow>)> {
        let class = &self.classes[self.class_of[i]];
        let slot = &self.state.slots[si];
        // The cases `try_new_slot` answers before its loop over terms, or where that loop
        // needs the candidate list (a zone to pick, minValues to check).
        let before_loop = (class.terms.len() == 1 && class.terms[0].is_empty())
            || self.rides(i, si, avoid_gpu)
            || (self.needs_zone(i) && slot.zone.is_none())
            || slot
                .pool
                .is_some_and(|pi| !self.snap.pools[pi].min_values.is_empty());
        if before_loop {
            return self
                .try_new_slot(i, si, avoid_gpu)
                .map(|g| (g.price, Some(g)));
        }
        let price = self.terms_price(i, si, avoid_gpu);
        debug_assert_eq!(
            price.map(f64::to_bits),
            self.try_new_slot(i, si, avoid_gpu)
                .map(|g| g.price.to_bits())
        );
        price.map(|p| (p, None))
    }

    /// [`Self::try_new_slot`]'s price through its loop over the terms of pod `i`'s class, for a
    /// claim that needs no zone picked and has no minValues: the same tests in the same order,
    /// the least price of the candidates kept rather than their list.
    fn terms_price(&self, i: usize, si: usize, avoid_gpu: bool) -> Option<f64> {
        let pod = &self.snap.pending[i];
        let slot = &self.state.slots[si];
        let add = demand(pod, &slot.devices);
        let row = self.fit_row(si);
        let need = self.fit_index.need(i, &pod.requests, row, &slot.used, &add);
        if !need.fits(self.fit_index.offers(row), slot.allocatable(self.snap)) {
            return None;
        }
        let terms = &self.classes[self.class_of[i]].terms;
        // A class of one term passed its shape check (`shape_ok`, which `usable` asks) with
        // that term: every key of it fits each candidate `usable` lets through.
        let one_term = terms.len() == 1;
        for term in terms {
            // The claim's requirements narrowed by the term (`slot.reqs.intersect(term)`)
            // without copying them, which was most of a verdict here: the term's keys as
            // `add_constraint` narrows them, every other key as the claim has it.
            // A constraint the claim has already (the term of the pod that opened it) is
            // its own intersection when it has no integer bounds to filter its values by.
            // The third field: whether candidates must be asked about the key (`asks_key`,
            // see `fits` below).
            let narrowed: Vec<(&str, Cow<Constraint>, bool)> = term
                .iter()
                .map(|(k, c)| {
                    let asked = asks_key(&slot.reqs, k, c, one_term);
                    match slot.reqs.get(k) {
                        Some(cur) if !asked => (k, Cow::Borrowed(cur), false),
                        Some(cur) => (k, Cow::Owned(cur.intersect(c)), true),
                        None => (k, Cow::Borrowed(c), asked),
                    }
                })
                .collect();
            let own = |k: &str| {
                narrowed
                    .iter()
                    .find(|(n, ..)| *n == k)
                    .map(|(_, c, _)| &**c)
            };
            let get = |k: &str| own(k).or_else(|| slot.reqs.get(k));
            let rest = || slot.reqs.iter().filter(|(k, _)| own(k).is_none());
            let all = || narrowed.iter().map(|(k, c, _)| (*k, &**c)).chain(rest());
            if !all().all(|(_, c)| c.satisfiable()) {
                continue;
            }
            let changed = || {
                narrowed
                    .iter()
                    .filter(|(.., fresh)| *fresh)
                    .map(|(k, c, _)| (*k, &**c))
            };
            let (zc, cc) = (get(labels::ZONE), get(labels::CAPACITY_TYPE));
            let mut any = false;
            // As the first of `priced_candidates`: least by `total_cmp`.
            let mut least: Option<f64> = None;
            for &c in &slot.candidates {
                let shape = &self.shapes[c];
                // `term_fits_shape` of the narrowed requirements. A key the claim has as it
                // is holds for its candidates already (each was kept for it), so only the
                // keys the term changes are asked: the claim's own keys were most of the
                // walk on a catalog pool (an instance-type list of hundreds of values).
                let fits = || {
                    let fits = changed().all(|(k, con)| key_fits_shape(k, con, shape))
                        && shape.price_allowed(zc, cc).is_some();
                    debug_assert_eq!(
                        fits,
                        all().all(|(k, con)| key_fits_shape(k, con, shape))
                            && shape.price_allowed(zc, cc).is_some()
                    );
                    fits
                };
                if !(self.usable(i, si, c, avoid_gpu, &need) && (term.is_empty() || fits())) {
                    continue;
                }
                any = true;
                if let Some(p) = shape.price_allowed(zc, cc)
                    && least.is_none_or(|l| p.total_cmp(&l).is_lt())
                {
                    least = Some(p);
                }
            }
            if !any {
                continue;
            }
            let zone = slot
                .zone
                .as_deref()
                .or_else(|| zc.and_then(|c| c.single_value()));
            if !self.topology_ok(i, slot, zone) {
                continue;
            }
            return least;
        }
        None
    }

    /// New claim `si`'s row of [`FitIndex`] amounts.
    pub(super) fn fit_row(&self, si: usize) -> &[i64] {
        let stride = self.fit_index.stride();
        let at = (si - self.state.fixed) * stride;
        &self.state.fit_rows[at..at + stride]
    }

    /// Writes new claim `si`'s row of [`FitIndex`] amounts, after a change to it.
    pub(super) fn write_fit_row(&mut self, si: usize) {
        let stride = self.fit_index.stride();
        let at = (si - self.state.fixed) * stride;
        let rows = &mut self.state.fit_rows;
        if rows.len() < at + stride {
            rows.resize(at + stride, 0);
        }
        let slot = &self.state.slots[si];
        self.fit_index
            .fill(&mut rows[at..at + stride], &slot.allocatable, &slot.used);
    }

    /// Whether `need` says what `sum` says of every shape (for debug assertions).
    pub(super) fn need_agrees(&self, need: &Need, sum: &crate::resources::Sum) -> bool {
        self.shapes.iter().enumerate().all(|(c, s)| {
            need.fits(self.fit_index.shape_row(c), &s.allocatable) == sum.fits(&s.allocatable)
        })
    }

    /// Whether pods of class `ci` keep off a place with these taints on their first try: a
    /// `PreferNoSchedule` taint they do not tolerate.
    pub(super) fn avoids(&self, ci: usize, taints: &[Taint]) -> bool {
        !self.relaxed
            && self.any_prefer_no_schedule
            && prefers_not(&self.classes[ci].tolerations, taints)
    }

    /// [`Self::avoids`] for slot `si`, reading the slot only when some taint may be avoided.
    pub(super) fn avoids_slot(&self, ci: usize, si: usize) -> bool {
        !self.relaxed
            && self.any_prefer_no_schedule
            && self.avoids(ci, self.state.slots[si].taints(self.snap))
    }

    /// Whether pod `i`'s verdict on a new claim depends on that claim alone (and on the pod's
    /// scan group): no topology term of its own, and no zone anti-affinity placed so far that
    /// could hold against it.
    pub(super) fn verdict_depends_on_slot_only(&self, i: usize) -> bool {
        let pod = &self.snap.pending[i];
        !self.dra_shared(i)
            && pod.spread.is_empty()
            && pod.affinity.is_empty()
            && pod.anti_affinity.is_empty()
            && self.state.zone_blocks.is_empty()
            // New claims count a driver's volumes when some node showed its count; volumes
            // of its own count the same on every claim for every pod of the scan group.
            && !(self.shares_volumes[i]
                && pod
                    .volumes
                    .iter()
                    .any(|v| self.learned_drivers.contains(&v.driver)))
    }

    pub(super) fn slot_compatible(&mut self, ci: usize, si: usize) -> bool {
        let class = &mut self.classes[ci];
        match class.slot_ok.get(si) {
            Answer::Yes => true,
            Answer::No => false,
            Answer::Unknown => {
                let slot = &self.state.slots[si];
                let shares_ok = !class.share
                    || slot
                        .pool
                        .is_none_or(|pi| self.snap.pools[pi].sharing.fractional);
                // A node whose device plugin fails requests for several replicas.
                let replicas_ok = !class.several
                    || slot
                        .pool
                        .is_none_or(|pi| !super::classes::one_replica_each(&self.snap.pools[pi]));
                let ok = shares_ok
                    && replicas_ok
                    && untolerated(&class.tolerations, slot.taints(self.snap)).is_none()
                    // In-flight: labels are what all candidates share; a term on other keys
                    // cannot be promised.
                    && class.terms.iter().any(|t| t.matches(slot.labels(self.snap)));
                class.slot_ok.set(si, ok);
                ok
            }
        }
    }

    /// Whether some candidate of new claim `si` suits class `ci`. Candidates only shrink, so a
    /// "no" is remembered and a "yes" is re-checked by the caller.
    fn new_slot_may_fit(&mut self, ci: usize, si: usize) -> bool {
        let class = &mut self.classes[ci];
        match class.slot_ok.get(si) {
            Answer::No => false,
            Answer::Yes => true,
            Answer::Unknown => {
                let ok = self.state.slots[si]
                    .candidates
                    .iter()
                    .any(|c| class.shape_ok[*c]);
                class.slot_ok.set(si, ok);
                ok
            }
        }
    }
}
