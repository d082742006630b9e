//! DRA in the simulated cluster: the devices a node publishes once its driver is up, and the
//! simulated scheduler's own device allocator.
//!
//! The allocator is written apart from the planner's (`autoscaler_core::dra::allocate`), so a
//! plan whose claims the scheduler cannot allocate shows up as pods that stay pending, as a
//! plan the scheduler would not follow does for resources. What both sides share is the
//! vocabulary (the claim and slice types), the CEL evaluator (the core's
//! [`Selectors`]: the language, not the allocation) and the driver's slice for an instance
//! type ([`nvidia_slice`]: the simulated node publishes what the real driver would, and the
//! planner predicts from the same model).
//!
//! The search: the requests of all of a pod's claims in order, each alternative of a
//! `firstAvailable` request in order, devices in slice order, depth first with backtracking,
//! at most [`SEARCH_BOUND`] steps per pod and node (a pod that needs more is treated as not
//! fitting the node). A device is taken by at most one claim; partitionable devices draw on
//! their slice's shared counters, counting those of the node's taken devices; `matchAttribute`
//! and `distinctAttribute` are checked once a claim's requests all have devices. A selector
//! that fails on a device (no such attribute) makes the pod not fit the node, as the
//! scheduler's allocator fails the claim.
//!
//! Simplifications: every claim of a simulated pod comes from a template (its own claim,
//! allocated when the pod binds and released when it leaves the node), and a node publishes
//! only the NVIDIA driver's slice, once it is Ready (the device plugin's delay).

use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::sync::Arc;

use autoscaler_core::InstanceType;
use autoscaler_core::dra::cel::{DeviceValue, Selectors};
use autoscaler_core::dra::template::{nvidia_slice, with_attributes};
use autoscaler_core::dra::{
    AllocatedDevice, AllocationMode, AttributeValue, ClaimSpec, DeviceClass, DeviceId,
    DeviceSelection, ResourceSlice,
};
use autoscaler_core::model::Pod;

/// Most search steps spent on one pod and one node.
pub const SEARCH_BOUND: u32 = 20_000;

/// What a node publishes: its driver's slice, and the device classes requests may name.
#[derive(Debug)]
pub struct NodeDevices {
    /// The slice (pool and name after the node).
    pub slice: ResourceSlice,
    /// The cluster's DeviceClasses.
    pub classes: Arc<BTreeMap<String, DeviceClass>>,
    /// Identity of the devices' contents (nodes of one type share selector verdicts).
    key: u64,
}

impl NodeDevices {
    /// The devices a node named `node` of type `it` publishes, `None` for a type without
    /// NVIDIA GPUs; `partitions` when its pool shares GPUs with MIG, `attributes` what its
    /// pool's image adds (`spec.dra.attributes`).
    pub fn for_node(
        it: &InstanceType,
        node: &str,
        partitions: bool,
        attributes: &BTreeMap<String, AttributeValue>,
        classes: Arc<BTreeMap<String, DeviceClass>>,
    ) -> Option<Arc<NodeDevices>> {
        let mut slice = nvidia_slice(it, node, partitions)?;
        with_attributes(&mut slice, attributes);
        let mut h = DefaultHasher::new();
        slice.driver.hash(&mut h);
        slice.devices.hash(&mut h);
        slice.shared_counters.hash(&mut h);
        Some(Arc::new(NodeDevices {
            slice,
            classes,
            key: h.finish(),
        }))
    }
}

/// A node's DRA state: its published devices (once Ready) and which of them claims hold.
#[derive(Clone, Debug, Default)]
pub struct NodeDra {
    /// Published devices; `None` for a node without any.
    pub devices: Option<Arc<NodeDevices>>,
    /// Per device of the slice, whether an allocated claim holds it.
    pub taken: Vec<bool>,
}

impl NodeDra {
    /// The state of a node publishing `devices`, nothing taken.
    pub fn new(devices: Option<Arc<NodeDevices>>) -> Self {
        let n = devices.as_ref().map_or(0, |d| d.slice.devices.len());
        NodeDra {
            devices,
            taken: vec![false; n],
        }
    }

    /// Marks the devices of an allocation taken (`true`) or free.
    pub fn mark(&mut self, devices: &[(usize, usize, String)], taken: bool) {
        for (_, d, _) in devices {
            if let Some(t) = self.taken.get_mut(*d) {
                *t = taken;
            }
        }
    }

    /// Devices taken.
    pub fn allocated(&self) -> usize {
        self.taken.iter().filter(|t| **t).count()
    }
}

/// One allocated device: (claim index in the pod, device index in the slice, request name as
/// allocation results name it).
pub type Taken = (usize, usize, String);

/// Selector verdicts, cached per thread: nodes of one type publish the same devices, so an
/// expression is evaluated once per device of each distinct slice.
struct Eval {
    selectors: Selectors,
    values: HashMap<u64, Rc<Vec<DeviceValue>>>,
    verdicts: HashMap<(u64, String), Rc<Vec<Option<bool>>>>,
}

thread_local! {
    static EVAL: RefCell<Eval> = RefCell::new(Eval {
        selectors: Selectors::new(),
        values: HashMap::new(),
        verdicts: HashMap::new(),
    });
}

/// Per device of `nd`, whether `expression` holds (`None`: it failed on the device or does
/// not compile).
fn verdicts(nd: &NodeDevices, expression: &str) -> Rc<Vec<Option<bool>>> {
    EVAL.with(|e| {
        let mut e = e.borrow_mut();
        let k = (nd.key, expression.to_string());
        if let Some(v) = e.verdicts.get(&k) {
            return v.clone();
        }
        let values = e
            .values
            .entry(nd.key)
            .or_insert_with(|| {
                Rc::new(
                    nd.slice
                        .devices
                        .iter()
                        .map(|d| DeviceValue::new(&nd.slice.driver, d))
                        .collect(),
                )
            })
            .clone();
        let out: Rc<Vec<Option<bool>>> = Rc::new(
            values
                .iter()
                .map(|v| e.selectors.matches(expression, v).ok())
                .collect(),
        );
        e.verdicts.insert(k, out.clone());
        out
    })
}

/// The devices of `nd` a selection may take: free, and every selector of the class and the
/// request true. `Err` when the class is unknown or a selector fails on a free device.
fn candidates(nd: &NodeDevices, sel: &DeviceSelection, taken: &[bool]) -> Result<Vec<usize>, ()> {
    let class = nd.classes.get(&sel.device_class_name).ok_or(())?;
    let mut ok: Vec<bool> = taken.iter().map(|t| !t).collect();
    for expr in class.selectors.iter().chain(&sel.selectors) {
        let v = verdicts(nd, expr);
        for (i, keep) in ok.iter_mut().enumerate() {
            if *keep {
                match v[i] {
                    Some(b) => *keep = b,
                    None => return Err(()),
                }
            }
        }
    }
    Ok(ok
        .iter()
        .enumerate()
        .filter(|(_, k)| **k)
        .map(|(i, _)| i)
        .collect())
}

/// One request to satisfy: its claim, and its alternatives with the names results carry.
struct Want<'p> {
    claim: usize,
    alternatives: Vec<(&'p DeviceSelection, String)>,
}

struct Search<'p> {
    nd: &'p NodeDevices,
    wants: Vec<Want<'p>>,
    claims: Vec<&'p ClaimSpec>,
    taken: Vec<bool>,
    /// Remaining amount of each (counter set, counter).
    counters: HashMap<(&'p str, &'p str), i128>,
    chosen: Vec<Taken>,
    steps: u32,
}

impl<'p> Search<'p> {
    fn consume(&mut self, d: usize, sign: i128) -> bool {
        let dev = &self.nd.slice.devices[d];
        if sign > 0 {
            for c in &dev.consumes_counters {
                for (name, q) in &c.counters {
                    let left = self
                        .counters
                        .get(&(c.counter_set.as_str(), name.as_str()))
                        .copied()
                        .unwrap_or(0);
                    if left < q.millis() {
                        return false;
                    }
                }
            }
        }
        for c in &dev.consumes_counters {
            for (name, q) in &c.counters {
                *self
                    .counters
                    .entry((c.counter_set.as_str(), name.as_str()))
                    .or_insert(0) -= sign * q.millis();
            }
        }
        true
    }

    fn take(&mut self, claim: usize, d: usize, request: &str) -> bool {
        if self.taken[d] || !self.consume(d, 1) {
            return false;
        }
        self.taken[d] = true;
        self.chosen.push((claim, d, request.to_string()));
        true
    }

    fn untake(&mut self) {
        if let Some((_, d, _)) = self.chosen.pop() {
            self.taken[d] = false;
            self.consume(d, -1);
        }
    }

    /// Satisfies wants `i..`; `Err` when the bound is spent or a selector failed.
    fn run(&mut self, i: usize) -> Result<bool, ()> {
        self.steps += 1;
        if self.steps > SEARCH_BOUND {
            return Err(());
        }
        if i == self.wants.len() {
            return Ok(self.constraints_hold());
        }
        let claim = self.wants[i].claim;
        for a in 0..self.wants[i].alternatives.len() {
            let (sel, name) = self.wants[i].alternatives[a].clone();
            let cand = candidates(self.nd, sel, &self.taken)?;
            match sel.allocation_mode {
                AllocationMode::All => {
                    // Every matching device of the node, free or not: one held by another
                    // claim fails the alternative.
                    let all = candidates(self.nd, sel, &vec![false; self.taken.len()])?;
                    if all.is_empty() || all.len() != cand.len() {
                        continue;
                    }
                    let before = self.chosen.len();
                    if cand.iter().all(|d| self.take(claim, *d, &name)) && self.run(i + 1)? {
                        return Ok(true);
                    }
                    while self.chosen.len() > before {
                        self.untake();
                    }
                }
                AllocationMode::ExactCount => {
                    if (cand.len() as u32) < sel.count {
                        continue;
                    }
                    if self.pick(i, claim, &name, &cand, 0, sel.count)? {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Picks `left` more of `cand[from..]` for want `i`, then goes on with the next want.
    fn pick(
        &mut self,
        i: usize,
        claim: usize,
        name: &str,
        cand: &[usize],
        from: usize,
        left: u32,
    ) -> Result<bool, ()> {
        if left == 0 {
            return self.run(i + 1);
        }
        for k in from..cand.len() {
            if cand.len() - k < left as usize {
                break;
            }
            if !self.take(claim, cand[k], name) {
                continue;
            }
            if self.pick(i, claim, name, cand, k + 1, left - 1)? {
                return Ok(true);
            }
            self.untake();
            self.steps += 1;
            if self.steps > SEARCH_BOUND {
                return Err(());
            }
        }
        Ok(false)
    }

    fn attribute(&self, d: usize, qualified: &str) -> Option<&'p AttributeValue> {
        let dev = &self.nd.slice.devices[d];
        let short = qualified
            .strip_prefix(self.nd.slice.driver.as_str())
            .and_then(|s| s.strip_prefix('/'));
        dev.attributes
            .get(qualified)
            .or_else(|| short.and_then(|s| dev.attributes.get(s)))
    }

    fn constraints_hold(&self) -> bool {
        for (ci, spec) in self.claims.iter().enumerate() {
            for c in &spec.constraints {
                let applies = |request: &str| {
                    c.requests.is_empty()
                        || c.requests.iter().any(|r| {
                            r == request || request.split_once('/').is_some_and(|(p, _)| p == r)
                        })
                };
                let values: Vec<Option<&AttributeValue>> = self
                    .chosen
                    .iter()
                    .filter(|(claim, _, r)| *claim == ci && applies(r))
                    .map(|(_, d, _)| {
                        let name = c
                            .match_attribute
                            .as_deref()
                            .or(c.distinct_attribute.as_deref())
                            .unwrap_or_default();
                        self.attribute(*d, name)
                    })
                    .collect();
                if values.iter().any(Option::is_none) {
                    return false;
                }
                if c.match_attribute.is_some() && values.windows(2).any(|w| w[0] != w[1]) {
                    return false;
                }
                if c.distinct_attribute.is_some() {
                    let mut seen = values.clone();
                    seen.sort();
                    seen.dedup();
                    if seen.len() != values.len() {
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// Devices for every claim of `pod` on a node with `dra`, or `None` when they cannot all be
/// allocated there (no devices published, an unknown class, a selector failing, nothing
/// free enough, constraints, the search bound).
pub fn allocate(pod: &Pod, dra: &NodeDra) -> Option<Vec<Taken>> {
    if pod.claims.is_empty() {
        return Some(Vec::new());
    }
    let nd = dra.devices.as_deref()?;
    let mut wants = Vec::new();
    for (ci, c) in pod.claims.iter().enumerate() {
        for r in &c.spec.requests {
            let alternatives = match &r.exactly {
                Some(sel) => vec![(sel, r.name.clone())],
                None => r
                    .first_available
                    .iter()
                    .map(|s| (&s.selection, format!("{}/{}", r.name, s.name)))
                    .collect(),
            };
            if alternatives.is_empty() {
                return None;
            }
            wants.push(Want {
                claim: ci,
                alternatives,
            });
        }
    }
    let mut counters = HashMap::new();
    for set in &nd.slice.shared_counters {
        for (name, q) in &set.counters {
            counters.insert((set.name.as_str(), name.as_str()), q.millis());
        }
    }
    let mut s = Search {
        nd,
        wants,
        claims: pod.claims.iter().map(|c| c.spec.as_ref()).collect(),
        taken: dra.taken.clone(),
        counters,
        chosen: Vec::new(),
        steps: 0,
    };
    for d in 0..dra.taken.len() {
        if dra.taken[d] {
            s.consume(d, 1);
        }
    }
    match s.run(0) {
        Ok(true) => Some(s.chosen),
        _ => None,
    }
}

/// The allocation results of `taken` for claim `claim`, as the API names devices.
pub fn results(dra: &NodeDra, taken: &[Taken], claim: usize) -> Vec<AllocatedDevice> {
    let Some(nd) = dra.devices.as_deref() else {
        return Vec::new();
    };
    taken
        .iter()
        .filter(|(c, _, _)| *c == claim)
        .map(|(_, d, r)| AllocatedDevice {
            request: r.clone(),
            device: DeviceId {
                driver: nd.slice.driver.clone(),
                pool: nd.slice.pool.clone(),
                device: nd.slice.devices[*d].name.clone(),
            },
        })
        .collect()
}

/// Physical GPUs the devices stand for (for GPU-hours): a whole GPU is one, a MIG device its
/// compute slices out of seven.
pub fn gpu_equivalent(dra: &NodeDra, taken: &[Taken]) -> f64 {
    let Some(nd) = dra.devices.as_deref() else {
        return 0.0;
    };
    taken
        .iter()
        .map(|(_, d, _)| {
            let dev = &nd.slice.devices[*d];
            match dev.attributes.get("profile") {
                Some(AttributeValue::String(p)) => p
                    .split('g')
                    .next()
                    .and_then(|n| n.parse::<f64>().ok())
                    .map_or(1.0, |n| n / 7.0),
                _ => 1.0,
            }
        })
        .sum()
}

#[cfg(test)]
mod tests;
