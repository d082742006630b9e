//! Instance types and their offerings: what a cloud can launch, in the core's vocabulary.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::requirements::Labels;
use crate::resources::Resources;

/// Spot or on-demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    /// Interruptible, cheaper.
    Spot,
    /// Regular.
    OnDemand,
}

impl CapacityType {
    /// The label value (`spot`, `on-demand`).
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Spot => "spot",
            CapacityType::OnDemand => "on-demand",
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One place an instance type can be bought: zone and capacity type, with its price.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offering {
    /// Zone name.
    pub zone: String,
    /// The zone's ID where the provider knows it (AWS: `use1-az1`), for requirements on
    /// [`crate::labels::ZONE_ID`] ([`crate::zone_ids`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// False when the provider recently reported no capacity (insufficient-capacity cache).
    pub available: bool,
}

/// The GPUs built into an instance type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuSpec {
    /// `nvidia`, `amd`, `aws` (Neuron), `habana`...
    pub vendor: String,
    /// Model as the catalog names it (`H100`, `A100-80GB`, `L4`, `T4`).
    pub model: String,
    /// Number of physical devices.
    pub count: u32,
    /// Memory per device in MiB.
    pub memory_mib: u64,
    /// The extended resource the device plugin advertises (`nvidia.com/gpu`).
    pub resource: String,
}

/// An instance type as the planner sees it.
///
/// `capacity` is what the machine has; `overhead` is kubelet/system reserve plus eviction
/// threshold, so `capacity - overhead` is the node's allocatable before DaemonSets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceType {
    /// Name (`p5.48xlarge`, `a3-highgpu-8g`).
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// Full machine capacity, GPU resources included.
    pub capacity: Resources,
    /// Kubelet/system reserve and eviction threshold.
    pub overhead: Resources,
    /// Built-in GPUs, if any.
    pub gpu: Option<GpuSpec>,
    /// Labels a node of this type carries (instance type, family, arch, GPU labels...). Zone and
    /// capacity type come from the offering.
    pub labels: Labels,
    /// Where and at what price the type can be bought.
    pub offerings: Vec<Offering>,
}

impl InstanceType {
    /// `capacity - overhead`.
    pub fn allocatable(&self) -> Resources {
        self.capacity.minus(&self.overhead)
    }

    /// The cheapest available offering, ties broken by zone then capacity type.
    pub fn cheapest_offering(&self) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available)
            .min_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.zone.cmp(&b.zone))
                    .then_with(|| a.capacity_type.cmp(&b.capacity_type))
            })
    }

    /// Number of physical GPUs (0 without GPUs).
    pub fn gpu_count(&self) -> u32 {
        self.gpu.as_ref().map_or(0, |g| g.count)
    }
}
