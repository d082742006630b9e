//! The DRA allocator: which devices of one node a pod's claims get.
//!
//! [`Inventory`] is what a node can reach: the devices of the slices published for it (or
//! predicted for it, [`crate::dra::template`]) and their shared counters. [`Usage`] is which
//! devices are taken already (allocated claims, and claims this plan put on the node).
//! [`Allocator::allocate`] gives a pod's unallocated claims their devices on one node, all
//! together (devices are never shared between claims), or says why it cannot:
//!
//! - a request is `exactly` one selection or `firstAvailable` alternatives, tried in order; a
//!   selection is `ExactCount` (`count` devices) or `All` (every matching device, none of them
//!   taken, at least one);
//! - a device matches when its class's and the request's CEL selectors are all true
//!   ([`crate::dra::cel`]), evaluated once per device and expression;
//! - devices with `consumesCounters` (MIG partitions) fit only while their counter sets have
//!   enough left, counting every taken device's consumption;
//! - `matchAttribute` / `distinctAttribute` constraints hold over the requests they name.
//!
//! The search is depth-first over the requests in order, each request's devices chosen in
//! inventory order (slice order, then device order), so the answer is deterministic and the
//! first found is the one a reader would pick by hand. It backtracks when a later request or a
//! constraint fails, and gives up after [`MAX_STEPS`] device trials per call (then the node
//! counts as not fitting, with that reason). It never takes a device twice nor more of a
//! counter than exists.

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};

use super::cel::{DeviceValue, SelectorError, Selectors};
use super::{
    AllocatedDevice, Allocation, AllocationMode, AttributeValue, ClaimSpec, Device, DeviceClass,
    DeviceId, DeviceSelection, ResourceSlice, SliceNodes,
};
use crate::quantity::Quantity;
use crate::requirements::Labels;

/// Device trials one [`Allocator::allocate`] call may make before it gives up.
pub const MAX_STEPS: u32 = 10_000;

/// Whether `slice`'s devices are reachable from the node `name` with `labels`.
pub fn reaches(slice: &ResourceSlice, name: &str, labels: &Labels) -> bool {
    match &slice.nodes {
        SliceNodes::Node(n) => n == name,
        SliceNodes::Selector(sel) => sel.matches(labels),
        SliceNodes::AllNodes => true,
    }
}

/// One device of an inventory, with its CEL value and verdicts computed on first use.
#[derive(Debug)]
pub struct InvDevice<'a> {
    /// Its identity.
    pub id: DeviceId,
    /// As published.
    pub device: &'a Device,
    slice: &'a ResourceSlice,
    value: OnceCell<DeviceValue>,
    verdicts: RefCell<Vec<(u32, Result<bool, SelectorError>)>>,
}

/// The devices one node can reach, and their shared counters.
#[derive(Debug, Default)]
pub struct Inventory<'a> {
    /// Devices in slice order, then device order.
    pub devices: Vec<InvDevice<'a>>,
    counters: HashMap<(&'a str, &'a str, &'a str), &'a BTreeMap<String, Quantity>>,
}

impl<'a> Inventory<'a> {
    /// The inventory of `slices` (those reaching one node).
    pub fn new(slices: impl IntoIterator<Item = &'a ResourceSlice>) -> Inventory<'a> {
        let mut inv = Inventory::default();
        for s in slices {
            for set in &s.shared_counters {
                inv.counters
                    .insert((&s.driver, &s.pool, &set.name), &set.counters);
            }
            for d in &s.devices {
                inv.devices.push(InvDevice {
                    id: DeviceId {
                        driver: s.driver.clone(),
                        pool: s.pool.clone(),
                        device: d.name.clone(),
                    },
                    device: d,
                    slice: s,
                    value: OnceCell::new(),
                    verdicts: RefCell::new(vec![]),
                });
            }
        }
        inv
    }

    /// Whether the node has no device at all.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// Devices taken, by identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The taken devices.
    pub taken: HashSet<DeviceId>,
}

impl Usage {
    /// Marks an allocation's devices taken.
    pub fn take(&mut self, a: &Allocation) {
        self.taken
            .extend(a.devices.iter().map(|d| d.device.clone()));
    }
}

/// Why a pod's claims get no devices on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Not enough (matching, free) devices here; another node may do.
    NoFit(String),
    /// The claim can never be allocated anywhere: unknown class, bad CEL. The words name the
    /// claim, request and expression.
    Invalid(String),
}

/// The allocator of one planning run: the device classes and the compiled selectors.
#[derive(Debug)]
pub struct Allocator<'a> {
    classes: &'a BTreeMap<String, DeviceClass>,
    selectors: Selectors,
    ids: HashMap<String, u32>,
}

/// A claim to allocate: its name for messages and its spec.
#[derive(Clone, Copy, Debug)]
pub struct ClaimRef<'c> {
    /// How messages name it (the pod's entry name).
    pub name: &'c str,
    /// What it asks.
    pub spec: &'c ClaimSpec,
}

impl<'a> Allocator<'a> {
    /// An allocator over `classes`.
    pub fn new(classes: &'a BTreeMap<String, DeviceClass>) -> Allocator<'a> {
        Allocator {
            classes,
            selectors: Selectors::new(),
            ids: HashMap::new(),
        }
    }

    /// Checks what can be checked without devices: every class exists and every expression
    /// compiles within the cost limit.
    ///
    /// # Errors
    /// [`Failure::Invalid`] naming the first problem.
    pub fn validate(&mut self, claims: &[ClaimRef<'_>]) -> Result<(), Failure> {
        for c in claims {
            if c.spec.requests.is_empty() {
                continue;
            }
            for r in &c.spec.requests {
                let alts = alternatives(r);
                if alts.is_empty() {
                    return Err(Failure::Invalid(format!(
                        "claim {}: request {:?} has neither exactly nor firstAvailable",
                        c.name, r.name
                    )));
                }
                for (rname, sel) in alts {
                    let class = self.classes.get(&sel.device_class_name).ok_or_else(|| {
                        Failure::Invalid(format!(
                            "claim {}: request {rname:?}: unknown device class {:?}",
                            c.name, sel.device_class_name
                        ))
                    })?;
                    for e in class.selectors.iter().chain(&sel.selectors) {
                        self.selectors.check(e).map_err(|err| {
                            Failure::Invalid(format!("claim {}: request {rname:?}: {err}", c.name))
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    fn matches(&mut self, sel: &DeviceSelection, d: &InvDevice<'_>) -> Result<bool, String> {
        let Some(class) = self.classes.get(&sel.device_class_name) else {
            return Err(format!("unknown device class {:?}", sel.device_class_name));
        };
        for e in class.selectors.iter().chain(&sel.selectors) {
            let next = self.ids.len() as u32;
            let id = *self.ids.entry(e.clone()).or_insert(next);
            let known = d
                .verdicts
                .borrow()
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, v)| v.clone());
            let verdict = match known {
                Some(v) => v,
                None => {
                    let value = d
                        .value
                        .get_or_init(|| DeviceValue::new(&d.id.driver, d.device));
                    let v = self.selectors.matches(e, value);
                    d.verdicts.borrow_mut().push((id, v.clone()));
                    v
                }
            };
            match verdict {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(err) => return Err(err.to_string()),
            }
        }
        Ok(true)
    }

    /// Allocates `claims` together on the node `node` with inventory `inv`, given `usage`.
    /// The allocations come back in the claims' order.
    ///
    /// # Errors
    /// [`Failure::NoFit`] when the devices do not suffice (or the search gave up),
    /// [`Failure::Invalid`] when a class is unknown or a selector fails on a device.
    pub fn allocate(
        &mut self,
        node: &str,
        inv: &Inventory<'_>,
        usage: &Usage,
        claims: &[ClaimRef<'_>],
    ) -> Result<Vec<Allocation>, Failure> {
        self.allocate_with(node, inv, &|d| usage.taken.contains(d), claims)
    }

    /// [`Allocator::allocate`] with the taken devices given as a predicate (the planner keeps
    /// the cluster's allocations and its own plan's apart).
    ///
    /// # Errors
    /// As [`Allocator::allocate`].
    pub fn allocate_with(
        &mut self,
        node: &str,
        inv: &Inventory<'_>,
        taken: &dyn Fn(&DeviceId) -> bool,
        claims: &[ClaimRef<'_>],
    ) -> Result<Vec<Allocation>, Failure> {
        // Fewer free devices than the requests need at least: no selector needs evaluating.
        let least: usize = claims
            .iter()
            .flat_map(|c| &c.spec.requests)
            .map(|r| {
                alternatives(r)
                    .iter()
                    .map(|(_, s)| match s.allocation_mode {
                        AllocationMode::All => 1,
                        AllocationMode::ExactCount => s.count as usize,
                    })
                    .min()
                    .unwrap_or(0)
            })
            .sum();
        let free = inv.devices.iter().filter(|d| !taken(&d.id)).count();
        if free < least {
            return Err(Failure::NoFit(format!(
                "the claims need at least {least} device(s), {free} free of {}",
                inv.devices.len()
            )));
        }
        // Candidate lists per (claim, request, alternative), errors first: they are data.
        let mut plans: Vec<Vec<Vec<Alt>>> = Vec::with_capacity(claims.len());
        for c in claims {
            let mut reqs = Vec::with_capacity(c.spec.requests.len());
            for r in &c.spec.requests {
                let mut alts = vec![];
                for (rname, sel) in alternatives(r) {
                    let mut matching = vec![];
                    for (i, d) in inv.devices.iter().enumerate() {
                        match self.matches(sel, d) {
                            Ok(true) => matching.push(i),
                            Ok(false) => {}
                            Err(why) => {
                                return Err(Failure::Invalid(format!(
                                    "claim {}: request {rname:?}: {why}",
                                    c.name
                                )));
                            }
                        }
                    }
                    alts.push(Alt {
                        name: rname,
                        parent: &r.name,
                        mode: sel.allocation_mode,
                        count: sel.count,
                        matching,
                    });
                }
                reqs.push(alts);
            }
            plans.push(reqs);
        }
        let mut search = Search::new(inv, taken, claims);
        let slots: Vec<(usize, usize)> = plans
            .iter()
            .enumerate()
            .flat_map(|(c, reqs)| (0..reqs.len()).map(move |r| (c, r)))
            .collect();
        match search.slot(&plans, &slots, 0) {
            Ok(true) => {}
            Ok(false) => return Err(Failure::NoFit(search.why(claims, &plans))),
            Err(GaveUp) => {
                return Err(Failure::NoFit(format!(
                    "device allocation search gave up after {MAX_STEPS} trials"
                )));
            }
        }
        let mut out: Vec<Allocation> = claims
            .iter()
            .map(|_| Allocation {
                node: Some(node.to_string()),
                devices: vec![],
            })
            .collect();
        for t in &search.chosen {
            out[t.claim].devices.push(AllocatedDevice {
                request: t.request.clone(),
                device: inv.devices[t.device].id.clone(),
            });
        }
        Ok(out)
    }
}

fn alternatives(r: &super::DeviceRequest) -> Vec<(String, &DeviceSelection)> {
    match &r.exactly {
        Some(sel) => vec![(r.name.clone(), sel)],
        None => r
            .first_available
            .iter()
            .map(|s| (format!("{}/{}", r.name, s.name), &s.selection))
            .collect(),
    }
}

struct Alt<'r> {
    name: String,
    parent: &'r str,
    mode: AllocationMode,
    count: u32,
    matching: Vec<usize>,
}

struct Taken {
    claim: usize,
    request: String,
    device: usize,
}

struct GaveUp;

/// The depth-first search's state: devices chosen so far, counters left, constraint values.
struct Search<'i, 'a, 'c> {
    inv: &'i Inventory<'a>,
    claims: &'i [ClaimRef<'c>],
    busy: Vec<bool>,
    left: HashMap<(&'a str, &'a str, &'a str), BTreeMap<String, i128>>,
    chosen: Vec<Taken>,
    steps: u32,
    /// The most devices one request found matching and free, for the reason.
    best: BTreeMap<(usize, usize), (usize, usize)>,
}

impl<'i, 'a, 'c> Search<'i, 'a, 'c> {
    fn new(
        inv: &'i Inventory<'a>,
        taken: &dyn Fn(&DeviceId) -> bool,
        claims: &'i [ClaimRef<'c>],
    ) -> Self {
        let busy: Vec<bool> = inv.devices.iter().map(|d| taken(&d.id)).collect();
        let mut left: HashMap<_, BTreeMap<String, i128>> = inv
            .counters
            .iter()
            .map(|(k, c)| (*k, c.iter().map(|(n, q)| (n.clone(), q.millis())).collect()))
            .collect();
        for (i, d) in inv.devices.iter().enumerate() {
            if busy[i] {
                consume(&mut left, d, -1);
            }
        }
        Search {
            inv,
            claims,
            busy,
            left,
            chosen: vec![],
            steps: 0,
            best: BTreeMap::new(),
        }
    }

    fn slot(
        &mut self,
        plans: &[Vec<Vec<Alt<'_>>>],
        slots: &[(usize, usize)],
        at: usize,
    ) -> Result<bool, GaveUp> {
        let Some(&(c, r)) = slots.get(at) else {
            return Ok(true);
        };
        for alt in &plans[c][r] {
            let free: Vec<usize> = alt
                .matching
                .iter()
                .copied()
                .filter(|i| !self.busy[*i])
                .collect();
            let entry = self.best.entry((c, r)).or_insert((0, 0));
            *entry = (*entry).max((free.len(), alt.matching.len()));
            let mark = self.chosen.len();
            let done = match alt.mode {
                AllocationMode::All => {
                    if alt.matching.is_empty() || free.len() < alt.matching.len() {
                        false
                    } else {
                        let mut ok = true;
                        for &i in &free {
                            self.tick()?;
                            if !self.take(c, alt, i) {
                                ok = false;
                                break;
                            }
                        }
                        ok && self.slot(plans, slots, at + 1)?
                    }
                }
                AllocationMode::ExactCount => {
                    self.choose(plans, slots, at, c, alt, &free, 0, alt.count as usize)?
                }
            };
            if done {
                return Ok(true);
            }
            self.undo_to(mark);
        }
        Ok(false)
    }

    #[allow(clippy::too_many_arguments)]
    fn choose(
        &mut self,
        plans: &[Vec<Vec<Alt<'_>>>],
        slots: &[(usize, usize)],
        at: usize,
        c: usize,
        alt: &Alt<'_>,
        free: &[usize],
        from: usize,
        remaining: usize,
    ) -> Result<bool, GaveUp> {
        if remaining == 0 {
            return self.slot(plans, slots, at + 1);
        }
        let mut j = from;
        while j + remaining <= free.len() {
            self.tick()?;
            let mark = self.chosen.len();
            if self.take(c, alt, free[j])
                && self.choose(plans, slots, at, c, alt, free, j + 1, remaining - 1)?
            {
                return Ok(true);
            }
            self.undo_to(mark);
            j += 1;
        }
        Ok(false)
    }

    fn tick(&mut self) -> Result<(), GaveUp> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            Err(GaveUp)
        } else {
            Ok(())
        }
    }

    /// Takes device `i` for `alt` of claim `c` if counters and constraints allow.
    fn take(&mut self, c: usize, alt: &Alt<'_>, i: usize) -> bool {
        if self.busy[i] {
            return false;
        }
        let d = &self.inv.devices[i];
        if !fits_counters(&self.left, d) {
            return false;
        }
        for k in &self.claims[c].spec.constraints {
            let applies = k.requests.is_empty()
                || k.requests.iter().any(|n| n == alt.parent || *n == alt.name);
            if !applies {
                continue;
            }
            let mut others = self.chosen.iter().filter(|t| {
                t.claim == c
                    && (k.requests.is_empty()
                        || k.requests.iter().any(|n| {
                            *n == t.request || t.request.split('/').next() == Some(n.as_str())
                        }))
            });
            if let Some(attr) = &k.match_attribute {
                let Some(v) = attribute(d, attr) else {
                    return false;
                };
                if others
                    .clone()
                    .any(|t| attribute(&self.inv.devices[t.device], attr) != Some(v))
                {
                    return false;
                }
            }
            if let Some(attr) = &k.distinct_attribute {
                let Some(v) = attribute(d, attr) else {
                    return false;
                };
                if others.any(|t| attribute(&self.inv.devices[t.device], attr) == Some(v)) {
                    return false;
                }
            }
        }
        consume(&mut self.left, d, -1);
        self.busy[i] = true;
        self.chosen.push(Taken {
            claim: c,
            request: alt.name.clone(),
            device: i,
        });
        true
    }

    fn undo_to(&mut self, mark: usize) {
        while self.chosen.len() > mark {
            let t = self.chosen.pop().expect("len checked");
            self.busy[t.device] = false;
            consume(&mut self.left, &self.inv.devices[t.device], 1);
        }
    }

    /// Words for a node that did not fit: the first request short of devices, or the
    /// constraints.
    fn why(&self, claims: &[ClaimRef<'_>], plans: &[Vec<Vec<Alt<'_>>>]) -> String {
        for (c, reqs) in plans.iter().enumerate() {
            for (r, alts) in reqs.iter().enumerate() {
                let (free, matching) = self.best.get(&(c, r)).copied().unwrap_or((0, 0));
                let needed = alts
                    .iter()
                    .map(|a| match a.mode {
                        AllocationMode::All => a.matching.len().max(1),
                        AllocationMode::ExactCount => a.count as usize,
                    })
                    .min()
                    .unwrap_or(0);
                if free < needed || (matching == 0 && needed > 0) {
                    return format!(
                        "claim {}: request {:?} needs {needed} device(s), {free} free of {matching} matching",
                        claims[c].name, claims[c].spec.requests[r].name
                    );
                }
            }
        }
        "the claims' devices do not fit together (constraints, shared counters or All requests)"
            .into()
    }
}

/// Adds (`sign` 1) or subtracts (-1) what `d` consumes of its counter sets.
fn consume<'a>(
    left: &mut HashMap<(&'a str, &'a str, &'a str), BTreeMap<String, i128>>,
    d: &InvDevice<'a>,
    sign: i128,
) {
    for cc in &d.device.consumes_counters {
        if let Some(set) = left.get_mut(&(
            d.slice.driver.as_str(),
            d.slice.pool.as_str(),
            cc.counter_set.as_str(),
        )) {
            for (name, q) in &cc.counters {
                *set.entry(name.clone()).or_insert(0) += sign * q.millis();
            }
        }
    }
}

fn fits_counters(
    left: &HashMap<(&str, &str, &str), BTreeMap<String, i128>>,
    d: &InvDevice<'_>,
) -> bool {
    d.device.consumes_counters.iter().all(|cc| {
        match left.get(&(
            d.id.driver.as_str(),
            d.id.pool.as_str(),
            cc.counter_set.as_str(),
        )) {
            // A counter set the pool does not publish: the device cannot be allocated.
            None => false,
            Some(set) => cc
                .counters
                .iter()
                .all(|(n, q)| set.get(n).is_some_and(|have| *have >= q.millis())),
        }
    })
}

/// A device's attribute by qualified name (`gpu.nvidia.com/productName`), also found under
/// its short name when the domain is the device's driver.
pub fn attribute<'d>(d: &'d InvDevice<'_>, qualified: &str) -> Option<&'d AttributeValue> {
    d.device.attributes.get(qualified).or_else(|| {
        let (domain, short) = qualified.split_once('/')?;
        (domain == d.id.driver).then(|| d.device.attributes.get(short))?
    })
}

#[cfg(test)]
mod tests;
