//! DRA in the planner: a pod with resource claims goes only where the allocator
//! ([`crate::dra::allocate`]) can give its claims devices.
//!
//! - Existing nodes offer the devices of the slices published for them, less the devices of
//!   the cluster's allocated claims and of the claims this plan put there.
//! - In-flight claims offer the template ([`crate::dra::template`]) of their candidate type
//!   with the fewest devices, less this plan's claims there.
//! - A new claim's candidate type fits when its template allocates every claim the plan put on
//!   the claim together with the pod's (allocated from scratch: a new node has nothing taken);
//!   candidates are narrowed to those as pods join, and a class of pods keeps only the types
//!   whose template allocates its claims alone (`Class::shape_ok`).
//! - A claim already allocated on a node of the snapshot pins the pod to that node (a claim
//!   allocated on a node that is gone, as in disruption's simulation, is allocated again). A
//!   shared claim (`resourceClaimName`) is allocated once: the first of its pods placed decides
//!   the place, the others go there or nowhere.
//! - A claim that can never be allocated (unknown class, a selector that does not compile or
//!   exceeds the cost limit, a selector failing on a device) gives the pod that reason; it is
//!   placed nowhere.
//!
//! All of it sits behind `Planner::dra`, `None` when no pending pod has a claim.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::dra::allocate::{Allocator, ClaimRef, Failure, Inventory, reaches};
use crate::dra::template::{nvidia_slice, with_attributes};
use crate::dra::{ClaimSource, ClaimSpec, DeviceId, ResourceSlice};
use crate::model::Snapshot;

use super::{Planner, SlotKind};

/// The predicted slices of every (pool, instance type), built before the planner so that its
/// inventories can borrow them.
#[derive(Debug, Default)]
pub(super) struct Templates {
    slices: Vec<ResourceSlice>,
    by_type: HashMap<(usize, String), usize>,
}

impl Templates {
    /// Templates for `snap`'s pools, or none when no pending pod has a claim.
    pub(super) fn of(snap: &Snapshot) -> Templates {
        let mut t = Templates::default();
        if !snap.pending.iter().any(|p| !p.claims.is_empty()) {
            return t;
        }
        for (pi, pool) in snap.pools.iter().enumerate() {
            let partitions = pool.sharing.mig.is_some();
            for it in pool.instance_types.iter() {
                let node = format!("{}.{}", pool.name, it.name);
                if let Some(mut s) = nvidia_slice(it, &node, partitions) {
                    with_attributes(&mut s, &pool.dra_attributes);
                    t.by_type.insert((pi, it.name.clone()), t.slices.len());
                    t.slices.push(s);
                }
            }
        }
        t
    }

    fn slice(&self, pool: usize, name: &str) -> Option<&ResourceSlice> {
        self.by_type
            .get(&(pool, name.to_string()))
            .map(|i| &self.slices[*i])
    }
}

/// One pending pod's DRA needs.
#[derive(Debug, Default)]
pub(super) struct PodNeed<'a> {
    /// Claims to allocate, with the shared claim's name for shared ones.
    claims: Vec<(ClaimRef<'a>, Option<&'a str>)>,
    /// The node an allocated claim pins the pod to.
    pin: Option<&'a str>,
    /// Why the pod's claims can never be allocated.
    invalid: Option<String>,
}

/// A pod's DRA identity for grouping: pods with equal keys have the same answers everywhere.
pub(super) type DraKey<'a> = Vec<(Option<&'a str>, &'a ClaimSpec, Option<&'a str>)>;

/// The planner's DRA state that does not change while planning.
#[derive(Debug)]
pub(super) struct DraPlan<'a> {
    alloc: RefCell<Allocator<'a>>,
    /// Devices of the cluster's allocated claims.
    taken: HashSet<DeviceId>,
    /// Per slot index of existing nodes and in-flight claims.
    fixed: HashMap<usize, Inventory<'a>>,
    /// Per shape index.
    shapes: Vec<Option<Inventory<'a>>>,
    /// Per pending pod.
    pods: Vec<PodNeed<'a>>,
    /// Per (class, shape): how many pods of the class a new node of the shape holds by its
    /// devices ([`Planner::dra_copies`]), worked out on first use.
    copies: RefCell<HashMap<(usize, usize), Option<u32>>>,
    /// Per pending pod, the demand groups of pods with claims that may share its nodes (the
    /// same selectors, tolerations and host ports, any claims), each with one member; worked
    /// out on first use, once classes and groups exist.
    families: RefCell<Option<Vec<Family>>>,
}

/// The demand groups of one family of pods with claims, each with one member (group, pod).
type Family = Arc<Vec<(usize, usize)>>;

/// Most copies of a pod's claims counted on one template (more than any GPU node holds of
/// the smallest device).
const MAX_COPIES: u32 = 64;

/// The DRA identity of every pending pod (empty for pods without claims).
pub(super) fn keys(snap: &Snapshot) -> Vec<DraKey<'_>> {
    snap.pending
        .iter()
        .map(|p| {
            p.claims
                .iter()
                .map(|c| {
                    (
                        c.shared_name(),
                        c.spec.as_ref(),
                        c.allocation.as_ref().and_then(|a| a.node.as_deref()),
                    )
                })
                .collect()
        })
        .collect()
}

impl<'a> Planner<'a> {
    /// Builds the DRA state once slots and shapes exist; `None` when no pod has a claim.
    pub(super) fn build_dra(&mut self, templates: &'a Templates) {
        let snap = self.snap;
        if !snap.pending.iter().any(|p| !p.claims.is_empty()) {
            return;
        }
        let mut alloc = Allocator::new(&snap.dra.classes);
        let node_names: HashSet<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
        let mut pods = Vec::with_capacity(snap.pending.len());
        for p in &snap.pending {
            let mut need = PodNeed::default();
            for c in &p.claims {
                let pinned = c
                    .allocation
                    .as_ref()
                    .and_then(|a| a.node.as_deref())
                    .filter(|n| node_names.contains(n));
                match pinned {
                    Some(n) if need.pin.is_some_and(|m| m != n) => {
                        need.invalid = Some(format!(
                            "claim {} is allocated on node {n}, another on node {}: no node has both",
                            c.name,
                            need.pin.unwrap_or_default()
                        ));
                    }
                    Some(n) => need.pin = Some(n),
                    None => need.claims.push((
                        ClaimRef {
                            name: &c.name,
                            spec: &c.spec,
                        },
                        match &c.source {
                            ClaimSource::Shared { claim } => Some(claim.as_str()),
                            ClaimSource::Template { .. } => None,
                        },
                    )),
                }
            }
            if need.invalid.is_none() {
                let refs: Vec<ClaimRef<'_>> = need.claims.iter().map(|(c, _)| *c).collect();
                if let Err(Failure::Invalid(why) | Failure::NoFit(why)) = alloc.validate(&refs) {
                    need.invalid = Some(why);
                }
            }
            pods.push(need);
        }
        let taken: HashSet<DeviceId> = snap
            .dra
            .claims
            .iter()
            .filter_map(|c| c.allocation.as_ref())
            .flat_map(|a| a.devices.iter().map(|d| d.device.clone()))
            .collect();
        // Existing nodes: their published slices; in-flight claims: the smallest template.
        let mut by_node: HashMap<&str, Vec<&ResourceSlice>> = HashMap::new();
        let mut wide: Vec<&ResourceSlice> = vec![];
        for s in &snap.dra.slices {
            match &s.nodes {
                crate::dra::SliceNodes::Node(n) => by_node.entry(n.as_str()).or_default().push(s),
                _ => wide.push(s),
            }
        }
        let mut fixed = HashMap::new();
        for (si, slot) in self.state.slots.iter().enumerate() {
            match slot.kind {
                SlotKind::Existing(ni) => {
                    let n = &snap.nodes[ni];
                    let mut slices = by_node.get(n.name.as_str()).cloned().unwrap_or_default();
                    slices.extend(
                        wide.iter()
                            .copied()
                            .filter(|s| reaches(s, &n.name, &n.labels)),
                    );
                    if !slices.is_empty() {
                        fixed.insert(si, Inventory::new(slices));
                    }
                }
                SlotKind::InFlight(ci) => {
                    let c = &snap.in_flight[ci];
                    let smallest = slot.pool.and_then(|pi| {
                        c.instance_types
                            .iter()
                            .filter_map(|t| templates.slice(pi, t))
                            .min_by_key(|s| s.devices.len())
                    });
                    if let Some(s) = smallest {
                        fixed.insert(si, Inventory::new([s]));
                    }
                }
                SlotKind::New => {}
            }
        }
        let shapes = self
            .shapes
            .iter()
            .map(|sh| {
                templates
                    .slice(sh.pool, &sh.name)
                    .map(|s| Inventory::new([s]))
            })
            .collect();
        self.dra = Some(DraPlan {
            alloc: RefCell::new(alloc),
            taken,
            fixed,
            shapes,
            pods,
            copies: RefCell::default(),
            families: RefCell::default(),
        });
    }

    /// The nodes of shape `c` the pending pods that may share pod `i`'s nodes need by their
    /// devices, spread evenly: for each of their demand groups, the pods still pending over
    /// the pods a node holds ([`Planner::dra_copies`]). The device plugin's GPUs get the same
    /// term from the class's pending GPU demand; claims of different sizes are different
    /// classes, so it is summed here over the groups instead.
    pub(super) fn dra_spread(&self, i: usize, c: usize) -> f64 {
        let Some(d) = &self.dra else { return 0.0 };
        if self.dra_copies(i, c).is_none() {
            return 0.0;
        }
        if d.families.borrow().is_none() {
            let pending = &self.snap.pending;
            let mut index: HashMap<_, usize> = HashMap::new();
            let mut members: Vec<Vec<(usize, usize)>> = Vec::new();
            let mut family_of = vec![usize::MAX; pending.len()];
            for (j, p) in pending.iter().enumerate() {
                if !self.has_dra(j) {
                    continue;
                }
                let key = (
                    &p.node_selector,
                    &p.tolerations,
                    p.gpu_share.is_some(),
                    &p.host_ports,
                );
                let n = index.len();
                let f = *index.entry(key).or_insert(n);
                if f == members.len() {
                    members.push(Vec::new());
                }
                let g = self.demand_group[j];
                if !members[f].iter().any(|(h, _)| *h == g) {
                    members[f].push((g, j));
                }
                family_of[j] = f;
            }
            let members: Vec<Family> = members.into_iter().map(Arc::new).collect();
            let by_pod = family_of
                .iter()
                .map(|f| members.get(*f).cloned().unwrap_or_default())
                .collect();
            *d.families.borrow_mut() = Some(by_pod);
        }
        let groups = d.families.borrow().as_ref().map(|f| f[i].clone());
        groups
            .iter()
            .flat_map(|g| g.iter())
            .filter_map(|(g, rep)| {
                self.dra_copies(*rep, c)
                    .map(|k| self.remaining[*g] as f64 / k)
            })
            .sum()
    }

    /// How many pods like pod `i` a new node of shape `c` holds by its devices: its claims
    /// allocated again and again on the shape's template until they no longer fit (at most
    /// [`MAX_COPIES`]), times the pending pods that share them (its class: a shared claim is
    /// one allocation for all of them). `None` when the pod has no claims to allocate (none,
    /// or pinned) or the shape cannot hold one copy. Claim sizing uses it as it uses resources
    /// for the device plugin's GPUs, so that pods asking GPUs through claims share nodes
    /// bought for them as such pods do.
    pub(super) fn dra_copies(&self, i: usize, c: usize) -> Option<f64> {
        let d = self.dra.as_ref()?;
        if !self.has_dra(i) {
            return None;
        }
        let need = &d.pods[i];
        if need.invalid.is_some() || need.pin.is_some() {
            return None;
        }
        let key = (self.class_of[i], c);
        if let Some(k) = d.copies.borrow().get(&key) {
            return k.map(f64::from);
        }
        let claims: Vec<ClaimRef<'_>> = need.claims.iter().map(|(c, _)| *c).collect();
        let mut k = 0;
        if let Some(inv) = &d.shapes[c] {
            let mut taken: HashSet<DeviceId> = HashSet::new();
            while k < MAX_COPIES {
                let got =
                    d.alloc
                        .borrow_mut()
                        .allocate_with("", inv, &|id| taken.contains(id), &claims);
                let Ok(allocs) = got else { break };
                taken.extend(
                    allocs
                        .into_iter()
                        .flat_map(|a| a.devices.into_iter().map(|d| d.device)),
                );
                k += 1;
            }
        }
        if self.dra_shared(i) {
            let ci = self.class_of[i];
            let members = self.class_of.iter().filter(|c| **c == ci).count() as u32;
            k = k.saturating_mul(members.max(1));
        }
        let k = (k > 0).then_some(k);
        d.copies.borrow_mut().insert(key, k);
        k.map(f64::from)
    }

    /// Whether pod `i` has DRA claims to place.
    pub(super) fn has_dra(&self, i: usize) -> bool {
        !self.snap.pending[i].claims.is_empty()
    }

    /// Why pod `i`'s claims can never be allocated, if so.
    pub(super) fn dra_invalid(&self, i: usize) -> Option<String> {
        self.dra.as_ref()?.pods[i].invalid.clone()
    }

    /// Whether pod `i` shares a claim with other pods (its answers then depend on where they
    /// went).
    pub(super) fn dra_shared(&self, i: usize) -> bool {
        self.snap.pending[i]
            .claims
            .iter()
            .any(|c| c.shared_name().is_some())
    }

    /// The slot a shared claim of pod `i` was already planned on, and the pod's claims still
    /// to allocate (the others).
    fn dra_pending(&self, i: usize) -> (Option<usize>, Vec<ClaimRef<'a>>) {
        let Some(d) = &self.dra else {
            return (None, vec![]);
        };
        let ns = &self.snap.pending[i].key.namespace;
        let mut at = None;
        let mut rest = vec![];
        for (c, shared) in &d.pods[i].claims {
            match shared.and_then(|s| self.state.dra_shared.get(&(ns.clone(), s.to_string()))) {
                Some(si) => at = Some(*si),
                None => rest.push(*c),
            }
        }
        (at, rest)
    }

    /// Whether pod `i`'s claims can be allocated on existing node or in-flight claim `si`.
    pub(super) fn dra_fits_fixed(&self, i: usize, si: usize) -> bool {
        let Some(d) = &self.dra else { return true };
        if !self.has_dra(i) {
            return true;
        }
        let need = &d.pods[i];
        let slot = &self.state.slots[si];
        if need.invalid.is_some() || need.pin.is_some_and(|n| n != slot.name(self.snap)) {
            return false;
        }
        let (at, rest) = self.dra_pending(i);
        if at.is_some_and(|a| a != si) {
            return false;
        }
        if rest.is_empty() {
            return true;
        }
        let Some(inv) = d.fixed.get(&si) else {
            return false;
        };
        let taken = |id: &DeviceId| d.taken.contains(id) || slot.dra_taken.contains(id);
        d.alloc
            .borrow_mut()
            .allocate_with(slot.name(self.snap), inv, &taken, &rest)
            .is_ok()
    }

    /// Whether candidate shape `c` of new claim `si` can allocate the claims already planned
    /// there together with pod `i`'s (`i` = `None`: the planned ones alone).
    pub(super) fn dra_fits_new(&self, i: Option<usize>, si: usize, c: usize) -> bool {
        let Some(d) = &self.dra else { return true };
        let slot = &self.state.slots[si];
        let mut claims: Vec<ClaimRef<'_>> = slot
            .dra_claims
            .iter()
            .map(|(name, spec)| ClaimRef {
                name,
                spec: spec.as_ref(),
            })
            .collect();
        if let Some(i) = i {
            if !self.has_dra(i) {
                return true;
            }
            let need = &d.pods[i];
            if need.invalid.is_some() || need.pin.is_some() {
                return false;
            }
            let (at, rest) = self.dra_pending(i);
            if at.is_some_and(|a| a != si) {
                return false;
            }
            claims.extend(rest);
        }
        if claims.is_empty() {
            return true;
        }
        let Some(inv) = &d.shapes[c] else {
            return false;
        };
        d.alloc
            .borrow_mut()
            .allocate_with(slot.name(self.snap), inv, &|_| false, &claims)
            .is_ok()
    }

    /// Whether pod `i`'s claims alone can be allocated on a new node of shape `c` (the class
    /// filter).
    pub(super) fn dra_shape_ok(&self, i: usize, c: usize) -> bool {
        let Some(d) = &self.dra else { return true };
        if !self.has_dra(i) {
            return true;
        }
        let need = &d.pods[i];
        if need.invalid.is_some() || need.pin.is_some() {
            return false;
        }
        let claims: Vec<ClaimRef<'_>> = need.claims.iter().map(|(c, _)| *c).collect();
        let Some(inv) = &d.shapes[c] else {
            return false;
        };
        d.alloc
            .borrow_mut()
            .allocate_with("", inv, &|_| false, &claims)
            .is_ok()
    }

    /// Records pod `i`'s claims on slot `si` (after it was placed there).
    pub(super) fn dra_commit(&mut self, i: usize, si: usize) {
        if self.dra.is_none() || !self.has_dra(i) {
            return;
        }
        let (_, rest) = self.dra_pending(i);
        let ns = self.snap.pending[i].key.namespace.clone();
        let d = self.dra.as_ref().expect("checked");
        for s in d.pods[i].claims.iter().filter_map(|(_, shared)| *shared) {
            self.state
                .dra_shared
                .entry((ns.clone(), s.to_string()))
                .or_insert(si);
        }
        let slot = &self.state.slots[si];
        if slot.kind == SlotKind::New {
            let added: Vec<(String, Arc<ClaimSpec>)> = rest
                .iter()
                .map(|c| (c.name.to_string(), Arc::new(c.spec.clone())))
                .collect();
            self.state.slots[si].dra_claims.extend(added);
            let keep: Vec<usize> = self.state.slots[si]
                .candidates
                .iter()
                .copied()
                .filter(|c| self.dra_fits_new(None, si, *c))
                .collect();
            self.state.slots[si].candidates = keep;
        } else if !rest.is_empty()
            && let Some(inv) = d.fixed.get(&si)
        {
            let taken = |id: &DeviceId| d.taken.contains(id) || slot.dra_taken.contains(id);
            let got = d
                .alloc
                .borrow_mut()
                .allocate_with(slot.name(self.snap), inv, &taken, &rest);
            if let Ok(allocs) = got {
                let ids = allocs
                    .into_iter()
                    .flat_map(|a| a.devices.into_iter().map(|d| d.device));
                self.state.slots[si].dra_taken.extend(ids);
            }
        }
    }

    /// Why no instance type of pool `pi` takes pod `i`'s claims, when that is the reason.
    pub(super) fn dra_reason(&self, i: usize, pi: usize) -> Option<String> {
        let d = self.dra.as_ref()?;
        if !self.has_dra(i) {
            return None;
        }
        let need = &d.pods[i];
        let pool = &self.snap.pools[pi].name;
        if let Some(why) = &need.invalid {
            return Some(why.clone());
        }
        if let Some(n) = need.pin {
            return Some(format!(
                "its claims are allocated on node {n}, which cannot take it; NodePool {pool} cannot help"
            ));
        }
        let claims: Vec<ClaimRef<'_>> = need.claims.iter().map(|(c, _)| *c).collect();
        let mut first_failure = None;
        for (c, sh) in self.shapes.iter().enumerate() {
            if sh.pool != pi {
                continue;
            }
            let Some(inv) = &d.shapes[c] else { continue };
            match d
                .alloc
                .borrow_mut()
                .allocate_with("", inv, &|_| false, &claims)
            {
                Ok(_) => return None,
                Err(Failure::NoFit(why) | Failure::Invalid(why)) => {
                    first_failure.get_or_insert(format!("{} ({why})", sh.name));
                }
            }
        }
        let names: Vec<&str> = claims.iter().map(|c| c.name).collect();
        Some(match first_failure {
            Some(f) => format!(
                "NodePool {pool}: no instance type's devices satisfy claim(s) {}: e.g. {f}",
                names.join(", ")
            ),
            None => format!(
                "NodePool {pool}: no instance type has DRA devices for claim(s) {}",
                names.join(", ")
            ),
        })
    }
}
