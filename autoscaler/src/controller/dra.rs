//! Dynamic Resource Allocation objects (`resource.k8s.io/v1`, k8s-openapi's types) turned into
//! the core's vocabulary ([`autoscaler_core::dra`]), field by field, and pods' claims resolved.
//!
//! A pod is translated once when it arrives (`cache`), without the claims it references: its
//! [`PodClaim`]s then carry only where each claim comes from (a template, or a shared claim by
//! name, with the generated claim's name from `status.resourceClaimStatuses`). Each planning
//! round indexes the DRA caches once ([`DraIndex`]) and resolves every planned pod's claims:
//! the spec from the template (or the claim, once it exists) and the claim's allocation. A
//! claim that does not resolve (template or claim missing, an object the cache cut to the
//! API's limits) leaves the pod out with a reason naming the entry and the object; nothing is
//! planned for it as if it asked for no device.
//!
//! Slices: only the newest `pool.generation` of each (driver, pool) counts, as for the
//! scheduler; a slice with `perDeviceNodeSelection` (devices naming their own nodes) or a
//! capacity that does not parse is left out and reported.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use autoscaler_core::dra::template::nvidia_slice;
use autoscaler_core::dra::{
    AllocatedDevice, Allocation, AllocationMode, AttributeValue, ClaimSource, ClaimSpec,
    CounterConsumption, CounterSet, Device, DeviceClass as CoreClass, DeviceConstraint, DeviceId,
    DeviceRequest as CoreRequest, DeviceSelection, DeviceSubRequest, Dra, PodClaim,
    ResourceClaim as CoreClaim, ResourceSlice as CoreSlice, SliceNodes,
};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::PodKey;
use autoscaler_core::quantity::Quantity;
use autoscaler_core::requirements::{Labels, NodeSelector};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClass, DeviceSelector, ResourceClaim, ResourceClaimSpec,
    ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The annotation a cached DRA object gets when a list of it was cut to the limits of `run::stores::dra`: the cut
/// fields, comma-separated. Set only in the controller's cache, never written to the API.
pub const TRUNCATED: &str = "gpu-autoscaler.dev/dra-truncated";

/// The cut fields of a cached object, if any (see [`TRUNCATED`]).
pub fn truncated(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(TRUNCATED))
        .map(String::as_str)
}

/// The DRA objects a snapshot is built from, as the caches hold them.
#[derive(Clone, Debug, Default)]
pub struct DraObjects {
    /// Every ResourceClaim.
    pub claims: Vec<Arc<ResourceClaim>>,
    /// Every ResourceClaimTemplate.
    pub templates: Vec<Arc<ResourceClaimTemplate>>,
    /// Every DeviceClass.
    pub classes: Vec<Arc<DeviceClass>>,
    /// Every ResourceSlice.
    pub slices: Vec<Arc<ResourceSlice>>,
}

fn ns_name(m: &ObjectMeta) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

fn expressions(selectors: Option<&Vec<DeviceSelector>>) -> Vec<String> {
    selectors
        .into_iter()
        .flatten()
        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
        .collect()
}

fn selection(
    class: &str,
    selectors: Option<&Vec<DeviceSelector>>,
    mode: Option<&str>,
    count: Option<i64>,
) -> DeviceSelection {
    DeviceSelection {
        device_class_name: class.to_string(),
        selectors: expressions(selectors),
        allocation_mode: match mode {
            Some("All") => AllocationMode::All,
            _ => AllocationMode::ExactCount,
        },
        // The API validates 1 <= count; anything else reads as the default.
        count: count
            .and_then(|c| u32::try_from(c).ok())
            .filter(|c| *c > 0)
            .unwrap_or(1),
    }
}

/// A claim's (or a template's claim's) `spec` in the core's terms.
pub fn claim_spec(spec: &ResourceClaimSpec) -> ClaimSpec {
    let Some(d) = &spec.devices else {
        return ClaimSpec::default();
    };
    let requests = d
        .requests
        .iter()
        .flatten()
        .map(|r| CoreRequest {
            name: r.name.clone(),
            exactly: r.exactly.as_ref().map(|e| {
                selection(
                    &e.device_class_name,
                    e.selectors.as_ref(),
                    e.allocation_mode.as_deref(),
                    e.count,
                )
            }),
            first_available: r
                .first_available
                .iter()
                .flatten()
                .map(|s| DeviceSubRequest {
                    name: s.name.clone(),
                    selection: selection(
                        &s.device_class_name,
                        s.selectors.as_ref(),
                        s.allocation_mode.as_deref(),
                        s.count,
                    ),
                })
                .collect(),
        })
        .collect();
    let constraints = d
        .constraints
        .iter()
        .flatten()
        .map(|c| DeviceConstraint {
            requests: c.requests.clone().unwrap_or_default(),
            match_attribute: c.match_attribute.clone(),
            distinct_attribute: c.distinct_attribute.clone(),
        })
        .collect();
    ClaimSpec {
        requests,
        constraints,
    }
}

/// The node an allocation's `nodeSelector` pins it to: the scheduler writes one term with one
/// `metadata.name In [node]` field; any other selector reads as not pinned to one node.
fn allocated_node(a: &AllocationResult) -> Option<String> {
    let terms = &a.node_selector.as_ref()?.node_selector_terms;
    let [term] = terms.as_slice() else {
        return None;
    };
    let fields = term.match_fields.as_deref().unwrap_or_default();
    let [f] = fields else {
        return None;
    };
    let values = f.values.as_deref().unwrap_or_default();
    match (f.key.as_str(), f.operator.as_str(), values) {
        ("metadata.name", "In", [node]) => Some(node.clone()),
        _ => None,
    }
}

/// A claim's `status.allocation` in the core's terms.
pub fn allocation(a: &AllocationResult) -> Allocation {
    Allocation {
        node: allocated_node(a),
        devices: a
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| AllocatedDevice {
                request: r.request.clone(),
                device: DeviceId {
                    driver: r.driver.clone(),
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                },
            })
            .collect(),
    }
}

/// A ResourceClaim in the core's terms.
pub fn claim(c: &ResourceClaim) -> CoreClaim {
    let (namespace, name) = ns_name(&c.metadata);
    let status = c.status.as_ref();
    CoreClaim {
        reserved_for: status
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
            .map(|r| PodKey {
                namespace: namespace.clone(),
                name: r.name.clone(),
            })
            .collect(),
        allocation: status.and_then(|s| s.allocation.as_ref()).map(allocation),
        spec: Arc::new(claim_spec(&c.spec)),
        namespace,
        name,
    }
}

/// A DeviceClass in the core's terms.
pub fn class(c: &DeviceClass) -> CoreClass {
    CoreClass {
        name: c.metadata.name.clone().unwrap_or_default(),
        selectors: expressions(c.spec.selectors.as_ref()),
        extended_resource_name: c.spec.extended_resource_name.clone(),
    }
}

fn quantity(q: &str, field: &str) -> Result<Quantity, String> {
    Quantity::parse(q).map_err(|e| format!("{field}: {q:?}: {e}"))
}

/// A ResourceSlice in the core's terms.
///
/// # Errors
/// The field that does not translate: a capacity or counter that is no quantity, a node
/// selector term with a bad operator, `perDeviceNodeSelection` (not modelled).
pub fn slice(s: &ResourceSlice) -> Result<CoreSlice, String> {
    let spec = &s.spec;
    let nodes = if let Some(n) = &spec.node_name {
        SliceNodes::Node(n.clone())
    } else if spec.all_nodes == Some(true) {
        SliceNodes::AllNodes
    } else if let Some(sel) = &spec.node_selector {
        let mut terms = Vec::new();
        for (i, t) in sel.node_selector_terms.iter().enumerate() {
            terms.push(
                super::translate::node_selector_term(
                    t,
                    &format!("spec.nodeSelector.nodeSelectorTerms[{i}]"),
                )
                .map_err(|e| e.to_string())?,
            );
        }
        SliceNodes::Selector(NodeSelector::new(&Labels::new(), terms))
    } else {
        return Err(
            "spec: per-device node selection (perDeviceNodeSelection) is not modelled".into(),
        );
    };
    let mut devices = Vec::new();
    for (i, d) in spec.devices.iter().flatten().enumerate() {
        let at = format!("spec.devices[{i}]");
        let attributes = d
            .attributes
            .iter()
            .flatten()
            .filter_map(|(k, a)| {
                let v = match (a.bool, a.int, &a.string, &a.version) {
                    (Some(b), ..) => AttributeValue::Bool(b),
                    (_, Some(n), ..) => AttributeValue::Int(n),
                    (_, _, Some(s), _) => AttributeValue::String(s.clone()),
                    (.., Some(v)) => AttributeValue::Version(v.clone()),
                    // An attribute with no value: the API refuses it; nothing to match.
                    _ => return None,
                };
                Some((k.clone(), v))
            })
            .collect();
        let mut capacity = BTreeMap::new();
        for (k, c) in d.capacity.iter().flatten() {
            capacity.insert(
                k.clone(),
                quantity(&c.value.0, &format!("{at}.capacity[{k:?}]"))?,
            );
        }
        let mut consumes = Vec::new();
        for (j, cc) in d.consumes_counters.iter().flatten().enumerate() {
            let mut counters = BTreeMap::new();
            for (k, c) in &cc.counters {
                counters.insert(
                    k.clone(),
                    quantity(
                        &c.value.0,
                        &format!("{at}.consumesCounters[{j}].counters[{k:?}]"),
                    )?,
                );
            }
            consumes.push(CounterConsumption {
                counter_set: cc.counter_set.clone(),
                counters,
            });
        }
        devices.push(Device {
            name: d.name.clone(),
            attributes,
            capacity,
            consumes_counters: consumes,
        });
    }
    let mut shared_counters = Vec::new();
    for (i, set) in spec.shared_counters.iter().flatten().enumerate() {
        let mut counters = BTreeMap::new();
        for (k, c) in &set.counters {
            counters.insert(
                k.clone(),
                quantity(
                    &c.value.0,
                    &format!("spec.sharedCounters[{i}].counters[{k:?}]"),
                )?,
            );
        }
        shared_counters.push(CounterSet {
            name: set.name.clone(),
            counters,
        });
    }
    Ok(CoreSlice {
        name: s.metadata.name.clone().unwrap_or_default(),
        driver: spec.driver.clone(),
        pool: spec.pool.name.clone(),
        generation: spec.pool.generation,
        nodes,
        devices,
        shared_counters,
    })
}

/// A pod's `spec.resourceClaims` as unresolved [`PodClaim`]s (source only; see the module
/// docs), in order.
///
/// # Errors
/// The entry naming neither a claim nor a template (the API refuses such a pod).
pub fn pod_claims(
    spec: &PodSpec,
    status: Option<&k8s_openapi::api::core::v1::PodStatus>,
) -> Result<Vec<PodClaim>, (usize, &'static str)> {
    let generated = |entry: &str| {
        status
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .into_iter()
            .flatten()
            .find(|s| s.name == entry)
            .and_then(|s| s.resource_claim_name.clone())
    };
    let mut out = Vec::new();
    for (i, c) in spec.resource_claims.iter().flatten().enumerate() {
        let source = match (&c.resource_claim_name, &c.resource_claim_template_name) {
            (Some(claim), _) => ClaimSource::Shared {
                claim: claim.clone(),
            },
            (None, Some(template)) => ClaimSource::Template {
                template: template.clone(),
                claim: generated(&c.name),
            },
            (None, None) => {
                return Err((
                    i,
                    "names neither resourceClaimName nor resourceClaimTemplateName",
                ));
            }
        };
        out.push(PodClaim {
            name: c.name.clone(),
            source,
            spec: Arc::new(ClaimSpec::default()),
            allocation: None,
        });
    }
    Ok(out)
}

/// Devices per driver a Node of `it` is predicted to publish: the core's template for it
/// (MIG partitions when the NodePool shares GPUs with MIG).
pub fn expected_devices(it: &InstanceType, partitions: bool) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    if let Some(s) = nvidia_slice(it, "", partitions) {
        *out.entry(s.driver).or_default() += s.devices.len();
    }
    out
}

/// Devices per driver the ResourceSlices published for Node `node` hold, counting only the
/// newest generation of each pool.
pub fn published_devices(slices: &[Arc<ResourceSlice>], node: &str) -> BTreeMap<String, usize> {
    let mine: Vec<&ResourceSlice> = slices
        .iter()
        .map(|s| s.as_ref())
        .filter(|s| s.spec.node_name.as_deref() == Some(node))
        .collect();
    let mut newest: HashMap<(&str, &str), i64> = HashMap::new();
    for s in &mine {
        let g = newest
            .entry((&s.spec.driver, &s.spec.pool.name))
            .or_insert(s.spec.pool.generation);
        *g = (*g).max(s.spec.pool.generation);
    }
    let mut out = BTreeMap::new();
    for s in mine {
        if newest.get(&(s.spec.driver.as_str(), s.spec.pool.name.as_str()))
            == Some(&s.spec.pool.generation)
        {
            *out.entry(s.spec.driver.clone()).or_default() +=
                s.spec.devices.as_ref().map_or(0, Vec::len);
        }
    }
    out
}

/// The DRA objects of one planning round, translated once.
#[derive(Debug, Default)]
pub struct DraIndex {
    /// Classes, newest slices, allocated claims: the snapshot's [`Dra`].
    pub dra: Arc<Dra>,
    /// Claims by (namespace, name), or why they cannot be used.
    claims: HashMap<(String, String), Result<CoreClaim, String>>,
    /// Template claim specs by (namespace, name), or why they cannot be used.
    templates: HashMap<(String, String), Result<Arc<ClaimSpec>, String>>,
    /// `(object, problem)` for every object left out.
    pub problems: Vec<(String, String)>,
}

impl DraIndex {
    /// Translates the objects.
    pub fn new(objects: &DraObjects) -> DraIndex {
        let mut ix = DraIndex::default();
        let mut dra = Dra::default();
        for c in &objects.classes {
            let name = c.metadata.name.clone().unwrap_or_default();
            match truncated(&c.metadata) {
                Some(cut) => ix.problems.push((
                    format!("DeviceClass {name}"),
                    format!("over the API's limits, left out: {cut}"),
                )),
                None => {
                    dra.classes.insert(name, class(c));
                }
            }
        }
        let mut newest: HashMap<(String, String), i64> = HashMap::new();
        let mut slices = Vec::new();
        for s in &objects.slices {
            let name = s.metadata.name.clone().unwrap_or_default();
            if let Some(cut) = truncated(&s.metadata) {
                // Fewer devices than published only makes the planner launch more: kept.
                ix.problems.push((
                    format!("ResourceSlice {name}"),
                    format!("over the API's limits, cut to them: {cut}"),
                ));
            }
            match slice(s) {
                Ok(cs) => {
                    let g = newest
                        .entry((cs.driver.clone(), cs.pool.clone()))
                        .or_insert(cs.generation);
                    *g = (*g).max(cs.generation);
                    slices.push(cs);
                }
                Err(e) => ix.problems.push((format!("ResourceSlice {name}"), e)),
            }
        }
        slices.retain(|s| newest.get(&(s.driver.clone(), s.pool.clone())) == Some(&s.generation));
        dra.slices = slices;
        for c in &objects.claims {
            let key = ns_name(&c.metadata);
            let entry = match truncated(&c.metadata) {
                Some(cut) => Err(format!(
                    "ResourceClaim {}/{} is over the API's limits ({cut})",
                    key.0, key.1
                )),
                None => Ok(claim(c)),
            };
            if let Ok(core) = &entry
                && core.allocation.is_some()
            {
                dra.claims.push(core.clone());
            }
            ix.claims.insert(key, entry);
        }
        for t in &objects.templates {
            let key = ns_name(&t.metadata);
            let entry = match truncated(&t.metadata) {
                Some(cut) => Err(format!(
                    "ResourceClaimTemplate {}/{} is over the API's limits ({cut})",
                    key.0, key.1
                )),
                None => Ok(Arc::new(claim_spec(&t.spec.spec))),
            };
            ix.templates.insert(key, entry);
        }
        ix.dra = Arc::new(dra);
        ix
    }

    /// Fills a pod's claims (specs and allocations) from the objects.
    ///
    /// # Errors
    /// The entry that does not resolve and why, for the pod's reason.
    pub fn resolve(&self, namespace: &str, claims: &mut [PodClaim]) -> Result<(), String> {
        for (i, c) in claims.iter_mut().enumerate() {
            let at = format!("spec.resourceClaims[{i}] ({:?})", c.name);
            let existing = c.claim_name().map(|n| {
                self.claims
                    .get(&(namespace.to_string(), n.to_string()))
                    .ok_or_else(|| format!("ResourceClaim {namespace}/{n} not found"))
            });
            match (&c.source, existing) {
                (_, Some(Ok(Ok(claim)))) => {
                    c.spec = claim.spec.clone();
                    c.allocation = claim.allocation.clone();
                }
                (_, Some(Ok(Err(why)))) => return Err(format!("{at}: {why}")),
                (ClaimSource::Shared { .. }, Some(Err(why))) => {
                    return Err(format!("{at}: {why}"));
                }
                // A template's claim not made yet (or just gone): the template says what it is.
                (ClaimSource::Template { template, .. }, _) => {
                    match self
                        .templates
                        .get(&(namespace.to_string(), template.clone()))
                    {
                        Some(Ok(spec)) => c.spec = spec.clone(),
                        Some(Err(why)) => return Err(format!("{at}: {why}")),
                        None => {
                            return Err(format!(
                                "{at}: ResourceClaimTemplate {namespace}/{template} not found"
                            ));
                        }
                    }
                }
                (ClaimSource::Shared { claim }, None) => {
                    return Err(format!("{at}: ResourceClaim {namespace}/{claim} not found"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
