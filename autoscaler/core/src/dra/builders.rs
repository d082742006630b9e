//! Builders for DRA values in tests and fixtures: `class("gpu.nvidia.com")`,
//! `device("gpu-0").string("productName", "H100").capacity("memory", "80Gi")`,
//! `claim().request(request("gpu").class("gpu.nvidia.com").count(2))`.
//!
//! Like [`crate::builders`], they panic on malformed literals: tests and benchmarks only.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    AllocatedDevice, Allocation, AllocationMode, AttributeValue, ClaimSource, ClaimSpec,
    CounterConsumption, CounterSet, Device, DeviceClass, DeviceConstraint, DeviceId, DeviceRequest,
    DeviceSelection, DeviceSubRequest, PodClaim, ResourceClaim, ResourceSlice, SliceNodes,
};
use crate::model::PodKey;
use crate::quantity::Quantity;

fn q(text: &str) -> Quantity {
    Quantity::parse(text).expect("literal quantity")
}

/// A DeviceClass selecting the devices of `driver` (the NVIDIA driver's classes are named
/// after their driver in the same way): `device.driver == "<driver>"`.
pub fn class(name: &str) -> DeviceClass {
    DeviceClass {
        name: name.into(),
        selectors: vec![format!("device.driver == {name:?}")],
        extended_resource_name: None,
    }
}

/// A DeviceClass with exactly these selectors.
pub fn class_with(name: &str, selectors: &[&str]) -> DeviceClass {
    DeviceClass {
        name: name.into(),
        selectors: selectors.iter().map(|s| s.to_string()).collect(),
        extended_resource_name: None,
    }
}

/// Starts a device with no attributes.
pub fn device(name: &str) -> DeviceBuilder {
    DeviceBuilder(Device {
        name: name.into(),
        ..Device::default()
    })
}

/// Builder for [`Device`].
#[derive(Clone, Debug)]
pub struct DeviceBuilder(pub Device);

impl DeviceBuilder {
    /// Sets any attribute.
    pub fn attr(mut self, name: &str, value: AttributeValue) -> Self {
        self.0.attributes.insert(name.into(), value);
        self
    }
    /// Sets a string attribute.
    pub fn string(self, name: &str, value: &str) -> Self {
        self.attr(name, AttributeValue::String(value.into()))
    }
    /// Sets an int attribute.
    pub fn int(self, name: &str, value: i64) -> Self {
        self.attr(name, AttributeValue::Int(value))
    }
    /// Sets a bool attribute.
    pub fn bool(self, name: &str, value: bool) -> Self {
        self.attr(name, AttributeValue::Bool(value))
    }
    /// Sets a version attribute.
    pub fn version(self, name: &str, value: &str) -> Self {
        self.attr(name, AttributeValue::Version(value.into()))
    }
    /// Sets a capacity (`"80Gi"`).
    pub fn capacity(mut self, name: &str, value: &str) -> Self {
        self.0.capacity.insert(name.into(), q(value));
        self
    }
    /// Consumes `counters` (name, quantity) of the slice's counter set `set`.
    pub fn consumes(mut self, set: &str, counters: &[(&str, &str)]) -> Self {
        self.0.consumes_counters.push(CounterConsumption {
            counter_set: set.into(),
            counters: counters
                .iter()
                .map(|(n, v)| (n.to_string(), q(v)))
                .collect(),
        });
        self
    }
    /// Finishes.
    pub fn build(self) -> Device {
        self.0
    }
}

impl From<DeviceBuilder> for Device {
    fn from(b: DeviceBuilder) -> Device {
        b.0
    }
}

/// Starts the slice of `driver`'s devices local to `node` (pool named after the node).
pub fn slice(node: &str, driver: &str) -> SliceBuilder {
    SliceBuilder(ResourceSlice {
        name: format!("{node}-{driver}"),
        driver: driver.into(),
        pool: node.into(),
        generation: 1,
        nodes: SliceNodes::Node(node.into()),
        devices: vec![],
        shared_counters: vec![],
    })
}

/// Builder for [`ResourceSlice`].
#[derive(Clone, Debug)]
pub struct SliceBuilder(pub ResourceSlice);

impl SliceBuilder {
    /// Sets which nodes reach the devices.
    pub fn nodes(mut self, nodes: SliceNodes) -> Self {
        self.0.nodes = nodes;
        self
    }
    /// Sets the pool name.
    pub fn pool(mut self, pool: &str) -> Self {
        self.0.pool = pool.into();
        self
    }
    /// Adds a device.
    pub fn device(mut self, d: impl Into<Device>) -> Self {
        self.0.devices.push(d.into());
        self
    }
    /// Adds a counter set.
    pub fn counters(mut self, set: &str, counters: &[(&str, &str)]) -> Self {
        self.0.shared_counters.push(CounterSet {
            name: set.into(),
            counters: counters
                .iter()
                .map(|(n, v)| (n.to_string(), q(v)))
                .collect(),
        });
        self
    }
    /// Finishes.
    pub fn build(self) -> ResourceSlice {
        self.0
    }
}

impl From<SliceBuilder> for ResourceSlice {
    fn from(b: SliceBuilder) -> ResourceSlice {
        b.0
    }
}

/// Starts an `exactly` request for one device of `class` named `name`.
pub fn request(name: &str) -> RequestBuilder {
    RequestBuilder {
        name: name.into(),
        selection: DeviceSelection {
            device_class_name: String::new(),
            selectors: vec![],
            allocation_mode: AllocationMode::ExactCount,
            count: 1,
        },
        alternatives: vec![],
    }
}

/// Builder for [`DeviceRequest`]: `exactly` unless alternatives were added with
/// [`RequestBuilder::or`], then `firstAvailable`.
#[derive(Clone, Debug)]
pub struct RequestBuilder {
    name: String,
    selection: DeviceSelection,
    alternatives: Vec<DeviceSubRequest>,
}

impl RequestBuilder {
    /// Sets the device class.
    pub fn class(mut self, class: &str) -> Self {
        self.selection.device_class_name = class.into();
        self
    }
    /// Adds a CEL selector.
    pub fn selector(mut self, expr: &str) -> Self {
        self.selection.selectors.push(expr.into());
        self
    }
    /// Asks for `n` devices (`ExactCount`).
    pub fn count(mut self, n: u32) -> Self {
        self.selection.count = n;
        self
    }
    /// Asks for every matching device (`All`).
    pub fn all(mut self) -> Self {
        self.selection.allocation_mode = AllocationMode::All;
        self
    }
    /// Adds a `firstAvailable` alternative named `name` (this builder's own selection is then
    /// unused: build the alternatives with [`request`] and pass them here).
    pub fn or(mut self, alternative: RequestBuilder) -> Self {
        self.alternatives.push(DeviceSubRequest {
            name: alternative.name,
            selection: alternative.selection,
        });
        self
    }
    /// Finishes.
    pub fn build(self) -> DeviceRequest {
        if self.alternatives.is_empty() {
            DeviceRequest {
                name: self.name,
                exactly: Some(self.selection),
                first_available: vec![],
            }
        } else {
            DeviceRequest {
                name: self.name,
                exactly: None,
                first_available: self.alternatives,
            }
        }
    }
}

/// Starts an empty claim spec.
pub fn claim() -> ClaimBuilder {
    ClaimBuilder(ClaimSpec::default())
}

/// Builder for [`ClaimSpec`].
#[derive(Clone, Debug)]
pub struct ClaimBuilder(pub ClaimSpec);

impl ClaimBuilder {
    /// Adds a request.
    pub fn request(mut self, r: RequestBuilder) -> Self {
        self.0.requests.push(r.build());
        self
    }
    /// Adds a `matchAttribute` constraint over `requests` (empty: all).
    pub fn match_attribute(mut self, attribute: &str, requests: &[&str]) -> Self {
        self.0.constraints.push(DeviceConstraint {
            requests: requests.iter().map(|s| s.to_string()).collect(),
            match_attribute: Some(attribute.into()),
            distinct_attribute: None,
        });
        self
    }
    /// Adds a `distinctAttribute` constraint over `requests` (empty: all).
    pub fn distinct_attribute(mut self, attribute: &str, requests: &[&str]) -> Self {
        self.0.constraints.push(DeviceConstraint {
            requests: requests.iter().map(|s| s.to_string()).collect(),
            match_attribute: None,
            distinct_attribute: Some(attribute.into()),
        });
        self
    }
    /// Finishes.
    pub fn build(self) -> ClaimSpec {
        self.0
    }
    /// The pod's own claim `name` from template `<name>-template`, not allocated.
    pub fn from_template(self, name: &str) -> PodClaim {
        PodClaim {
            name: name.into(),
            source: ClaimSource::Template {
                template: format!("{name}-template"),
                claim: None,
            },
            spec: Arc::new(self.0),
            allocation: None,
        }
    }
    /// The shared claim `claim`, referenced by the pod entry of the same name, not allocated.
    pub fn shared(self, claim: &str) -> PodClaim {
        PodClaim {
            name: claim.into(),
            source: ClaimSource::Shared {
                claim: claim.into(),
            },
            spec: Arc::new(self.0),
            allocation: None,
        }
    }
}

/// An allocation on `node` of `devices` given as (request, driver, pool, device).
pub fn allocation(node: &str, devices: &[(&str, &str, &str, &str)]) -> Allocation {
    Allocation {
        node: Some(node.into()),
        devices: devices
            .iter()
            .map(|(request, driver, pool, device)| AllocatedDevice {
                request: request.to_string(),
                device: DeviceId {
                    driver: driver.to_string(),
                    pool: pool.to_string(),
                    device: device.to_string(),
                },
            })
            .collect(),
    }
}

/// An allocated claim `namespace/name` reserved for `pods` (names in the same namespace).
pub fn allocated_claim(
    key: &str,
    spec: ClaimSpec,
    allocation: Allocation,
    pods: &[&str],
) -> ResourceClaim {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    ResourceClaim {
        namespace: namespace.into(),
        name: name.into(),
        spec: Arc::new(spec),
        allocation: Some(allocation),
        reserved_for: pods
            .iter()
            .map(|p| PodKey {
                namespace: namespace.into(),
                name: p.to_string(),
            })
            .collect(),
    }
}

/// Counters as a map, for expectations.
pub fn counters(entries: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    entries.iter().map(|(n, v)| (n.to_string(), q(v))).collect()
}
