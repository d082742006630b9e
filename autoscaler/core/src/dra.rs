//! Dynamic Resource Allocation (`resource.k8s.io/v1`) in the core's vocabulary: device classes,
//! the devices nodes publish in ResourceSlices, the ResourceClaims pods reference, and (in the
//! submodules) how devices are selected and allocated.
//!
//! # The model
//!
//! The types mirror the API closely so that the shell's translation is field by field:
//!
//! - [`DeviceClass`]: a name, CEL selectors every device of the class must satisfy, and the
//!   extended resource name the class may stand for.
//! - [`ResourceSlice`]: one driver's devices in one pool, for one node (`nodeName`), for the
//!   nodes a selector picks (`nodeSelector`) or for every node (`allNodes`), with the
//!   [`CounterSet`]s its partitionable devices draw from. A [`Device`] has attributes
//!   ([`AttributeValue`]: bool, int, string or semantic version) and capacities (quantities),
//!   keyed by qualified name (`gpu.nvidia.com/productName`, or `productName`, which belongs to
//!   the driver's domain), and the counters it consumes ([`CounterConsumption`]).
//! - [`ClaimSpec`]: the `spec` of a ResourceClaim (or of a ResourceClaimTemplate's claim):
//!   [`DeviceRequest`]s, each either `exactly` one [`DeviceSelection`] (class, selectors,
//!   allocation mode, count) or `firstAvailable` alternatives tried in order, and
//!   [`DeviceConstraint`]s (`matchAttribute`, `distinctAttribute`) across requests.
//! - [`Allocation`]: a claim's `status.allocation`: the node it is bound to and the devices.
//! - [`PodClaim`]: one entry of a pod's `spec.resourceClaims`, resolved: where the claim comes
//!   from ([`ClaimSource`]: the pod's own claim made from a template, or a claim shared by name),
//!   its spec, and its allocation when it already has one (which pins the pod to that node).
//! - [`ResourceClaim`]: a claim object as the cluster holds it (namespace, name, spec,
//!   allocation, the pods it is reserved for); [`Dra::claims`] lists the allocated ones, the
//!   source of truth for which devices are in use.
//!
//! Every device is identified by [`DeviceId`] (driver, pool, device name), as the API's
//! allocation results name them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::PodKey;
use crate::quantity::Quantity;
use crate::requirements::NodeSelector;

pub mod allocate;
pub mod builders;
pub mod cel;
pub mod template;

/// A DeviceClass: the devices a request naming it may get.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceClass {
    /// Object name (`gpu.nvidia.com`).
    pub name: String,
    /// `spec.selectors[].cel.expression`: every one must be true for a device of the class.
    #[serde(default)]
    pub selectors: Vec<String>,
    /// `spec.extendedResourceName`: the extended resource this class serves, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_resource_name: Option<String>,
}

/// The value of a device attribute (`DeviceAttribute`: exactly one of its fields).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AttributeValue {
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `string`.
    String(String),
    /// `version`: a semantic version (`1.2.3`), compared as one.
    Version(String),
}

impl fmt::Display for AttributeValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributeValue::Bool(b) => write!(f, "{b}"),
            AttributeValue::Int(i) => write!(f, "{i}"),
            AttributeValue::String(s) => write!(f, "{s:?}"),
            AttributeValue::Version(v) => write!(f, "version {v}"),
        }
    }
}

/// How much of a set of counters one device consumes (`DeviceCounterConsumption`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CounterConsumption {
    /// The name of a [`CounterSet`] of the same slice (`counterSet`).
    pub counter_set: String,
    /// Counter name -> amount consumed.
    pub counters: BTreeMap<String, Quantity>,
}

/// Counters shared by partitionable devices (`CounterSet`): e.g. one physical GPU's memory
/// slices, which its MIG devices draw from; allocated devices together never consume more.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CounterSet {
    /// Name, unique in the slice.
    pub name: String,
    /// Counter name -> amount available.
    pub counters: BTreeMap<String, Quantity>,
}

/// One device a driver publishes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Device {
    /// Name, unique in its pool (`gpu-0`).
    pub name: String,
    /// Attributes by name as published: qualified (`gpu.nvidia.com/productName`) or not
    /// (`productName`, which is in the driver's domain).
    #[serde(default)]
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Capacities by name, same naming as attributes.
    #[serde(default)]
    pub capacity: BTreeMap<String, Quantity>,
    /// Shared counters this device consumes when allocated (`consumesCounters`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumes_counters: Vec<CounterConsumption>,
}

/// Which nodes a slice's devices are reachable from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SliceNodes {
    /// `nodeName`: one node's local devices.
    Node(String),
    /// `nodeSelector`: every node whose labels the selector matches.
    Selector(NodeSelector),
    /// `allNodes: true`.
    AllNodes,
}

/// A ResourceSlice: one driver's devices in one pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceSlice {
    /// Object name (for messages only).
    pub name: String,
    /// `spec.driver` (`gpu.nvidia.com`).
    pub driver: String,
    /// `spec.pool.name`.
    pub pool: String,
    /// `spec.pool.generation`: only slices of a pool's newest generation count (the shell keeps
    /// only those; the core does not compare generations).
    #[serde(default)]
    pub generation: i64,
    /// Which nodes can reach the devices.
    pub nodes: SliceNodes,
    /// `spec.devices`.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// `spec.sharedCounters`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_counters: Vec<CounterSet>,
}

/// `allocationMode` of a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AllocationMode {
    /// Exactly `count` devices (the default, with count 1).
    #[default]
    ExactCount,
    /// Every matching device of the node; at least one must exist.
    All,
}

/// What a request (or one `firstAvailable` alternative) asks for: `ExactDeviceRequest` and
/// `DeviceSubRequest` share these fields.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceSelection {
    /// `deviceClassName`.
    pub device_class_name: String,
    /// `selectors[].cel.expression`, on top of the class's.
    #[serde(default)]
    pub selectors: Vec<String>,
    /// `allocationMode`.
    #[serde(default)]
    pub allocation_mode: AllocationMode,
    /// `count` for [`AllocationMode::ExactCount`] (default 1); ignored for `All`.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// One `firstAvailable` alternative.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceSubRequest {
    /// Name, unique in its request; an allocation result names it `<request>/<subrequest>`.
    pub name: String,
    /// What it asks for.
    #[serde(flatten)]
    pub selection: DeviceSelection,
}

/// One request of a claim: exactly one of `exactly` and `first_available` is set (the API
/// server validates that; a request with neither can never be allocated and says so).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceRequest {
    /// Name, unique in the claim.
    pub name: String,
    /// `exactly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exactly: Option<DeviceSelection>,
    /// `firstAvailable`: alternatives, tried in order; the first that can be allocated wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_available: Vec<DeviceSubRequest>,
}

/// A constraint across the devices of some (or all) requests of a claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceConstraint {
    /// `requests`: the requests (or `request/subrequest`) it applies to; empty means all.
    #[serde(default)]
    pub requests: Vec<String>,
    /// `matchAttribute`: every device has this attribute, with one value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_attribute: Option<String>,
    /// `distinctAttribute`: every device has this attribute, each with its own value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct_attribute: Option<String>,
}

/// A ResourceClaim's `spec.devices`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimSpec {
    /// `requests`.
    #[serde(default)]
    pub requests: Vec<DeviceRequest>,
    /// `constraints`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<DeviceConstraint>,
}

impl ClaimSpec {
    /// The devices the claim asks for when its first choices are taken: per request,
    /// `count` of its selection or first alternative (one for `All`, which takes at least
    /// one). The planner orders pods by it as it orders them by GPU resources.
    pub fn devices_asked(&self) -> u32 {
        self.requests
            .iter()
            .filter_map(|r| {
                r.exactly
                    .as_ref()
                    .or(r.first_available.first().map(|s| &s.selection))
            })
            .map(|s| match s.allocation_mode {
                AllocationMode::ExactCount => s.count,
                AllocationMode::All => 1,
            })
            // Counts come from users' claims: saturate rather than overflow.
            .fold(0u32, u32::saturating_add)
    }
}

/// A device as allocation results name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceId {
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device name.
    pub device: String,
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// One allocated device (`DeviceRequestAllocationResult`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AllocatedDevice {
    /// The request it satisfies (`request` or `request/subrequest`).
    pub request: String,
    /// The device.
    #[serde(flatten)]
    pub device: DeviceId,
}

/// `status.allocation` of a claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    /// The node the allocation is bound to (from `nodeSelector`'s single `metadata.name`
    /// term); `None` for devices reachable from several nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `devices.results`.
    #[serde(default)]
    pub devices: Vec<AllocatedDevice>,
}

/// Where a pod's claim comes from (`spec.resourceClaims[]` has one of the two names).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ClaimSource {
    /// `resourceClaimTemplateName`: the pod gets its own claim made from the template;
    /// `claim` is that claim's name once it exists (`status.resourceClaimStatuses`).
    Template {
        /// The template's name.
        template: String,
        /// The generated claim's name, when it exists.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claim: Option<String>,
    },
    /// `resourceClaimName`: a claim shared by every pod of the namespace naming it; all of
    /// them use one allocation, so they run on one node.
    Shared {
        /// The claim's name.
        claim: String,
    },
}

/// One entry of a pod's `spec.resourceClaims`, resolved by the shell.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodClaim {
    /// The entry's name in the pod (`spec.resourceClaims[].name`).
    pub name: String,
    /// Template or shared claim.
    pub source: ClaimSource,
    /// The claim's spec (the template's `spec.spec`, or the shared claim's `spec`); shared
    /// behind an `Arc` because many pods carry the same one.
    pub spec: Arc<ClaimSpec>,
    /// The claim's allocation, if it has one: the pod can only run on that node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
}

impl PodClaim {
    /// The name of the claim object, if it exists (templates' claims exist once the
    /// ResourceClaim controller made them).
    pub fn claim_name(&self) -> Option<&str> {
        match &self.source {
            ClaimSource::Template { claim, .. } => claim.as_deref(),
            ClaimSource::Shared { claim } => Some(claim),
        }
    }

    /// The shared claim's name, for claims several pods may use.
    pub fn shared_name(&self) -> Option<&str> {
        match &self.source {
            ClaimSource::Shared { claim } => Some(claim),
            ClaimSource::Template { .. } => None,
        }
    }
}

/// A ResourceClaim object as the cluster holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResourceClaim {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.devices`.
    pub spec: Arc<ClaimSpec>,
    /// `status.allocation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
    /// `status.reservedFor`: the pods using it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<PodKey>,
}

/// The DRA part of a [`crate::Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dra {
    /// DeviceClasses by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, DeviceClass>,
    /// Every ResourceSlice published (newest generation of each pool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<ResourceSlice>,
    /// Every allocated ResourceClaim: which devices are in use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ResourceClaim>,
}

/// A node's DRA devices: how many its slices publish and how many allocated claims hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceUse {
    /// Devices published for the node (`nodeName` slices).
    pub total: u32,
    /// Distinct devices of those held by allocated claims.
    pub allocated: u32,
}

/// Per node name, its [`DeviceUse`] (nodes without devices are absent). Every published device
/// counts, MIG partitions included, as the Cluster Autoscaler counts them.
pub fn device_use(dra: &Dra) -> BTreeMap<&str, DeviceUse> {
    let mut out: BTreeMap<&str, DeviceUse> = BTreeMap::new();
    let mut published: std::collections::HashSet<(&str, &str, &str)> = Default::default();
    for s in &dra.slices {
        if let SliceNodes::Node(n) = &s.nodes {
            out.entry(n.as_str()).or_default().total += s.devices.len() as u32;
            for d in &s.devices {
                published.insert((&s.driver, &s.pool, &d.name));
            }
        }
    }
    let mut seen: std::collections::HashSet<&DeviceId> = Default::default();
    for c in &dra.claims {
        let Some(a) = &c.allocation else { continue };
        let Some(node) = a.node.as_deref() else {
            continue;
        };
        for d in &a.devices {
            let id = &d.device;
            if published.contains(&(id.driver.as_str(), id.pool.as_str(), id.device.as_str()))
                && seen.insert(id)
                && let Some(u) = out.get_mut(node)
            {
                u.allocated += 1;
            }
        }
    }
    out
}

impl Dra {
    /// Whether the snapshot carries no DRA object at all (planning then skips DRA entirely).
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty() && self.slices.is_empty() && self.claims.is_empty()
    }

    /// [`Dra::is_empty`] behind the snapshot's `Arc` (for serde's `skip_serializing_if`).
    pub fn arc_is_empty(dra: &Arc<Dra>) -> bool {
        dra.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::builders::*;
    use crate::builders::pod;
    use crate::model::Pod;

    /// The snapshot format (`gpu-autoscaler snapshot`, replays) carries DRA claims unchanged.
    #[test]
    fn pod_claims_round_trip_through_serde() {
        let p: Pod = pod("trainer")
            .claim(
                claim()
                    .request(
                        request("gpu")
                            .or(request("big")
                                .class("gpu.nvidia.com")
                                .selector("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"))
                            .or(request("any").class("gpu.nvidia.com").count(2)),
                    )
                    .match_attribute("gpu.nvidia.com/productName", &[])
                    .from_template("gpu"),
            )
            .build();
        let json = serde_json::to_value(&p).unwrap();
        expect_test::expect![[r#"[{"name":"gpu","source":{"template":{"template":"gpu-template"}},"spec":{"constraints":[{"match_attribute":"gpu.nvidia.com/productName","requests":[]}],"requests":[{"first_available":[{"allocation_mode":"ExactCount","count":1,"device_class_name":"gpu.nvidia.com","name":"big","selectors":["device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"]},{"allocation_mode":"ExactCount","count":2,"device_class_name":"gpu.nvidia.com","name":"any","selectors":[]}],"name":"gpu"}]}}]"#]]
        .assert_eq(&json["claims"].to_string());
        let back: Pod = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
    }
}
