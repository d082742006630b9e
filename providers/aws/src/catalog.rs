//! From EC2's description of instance types to the planner's [`InstanceType`]s.
//!
//! Two steps, both pure: [`TypeFacts::from_sdk`] keeps what matters of a
//! `DescribeInstanceTypes` entry (vCPUs, memory, architecture, accelerators, ENI limits, usage
//! classes); [`TypeFacts::to_instance_type`] turns facts plus zones and prices into the core's
//! vocabulary for one node class (whose root volume is the ephemeral storage).
//!
//! What a type offers, as documented for users:
//! - capacity: vCPUs, memory less the VM overhead (`vm_memory_overhead_percent`, 7.5 % by
//!   default: EC2 reports nominal memory, the kernel sees less), the class's root volume as
//!   ephemeral storage, max pods, and one unit of the device resource per accelerator:
//!   NVIDIA → `nvidia.com/gpu`, AMD → `amd.com/gpu`, Habana → `habana.ai/gaudi`, AWS Neuron
//!   (Inferentia, Trainium) → `aws.amazon.com/neuron`;
//! - max pods: the VPC CNI's ENI formula on the default network card, `ENIs x (IPv4 addresses
//!   per ENI - 1) + 2`, unless the node class sets `max_pods`;
//! - overhead: the EKS-style kubelet reserve of `providers::catalog::overhead` (CPU on a
//!   sliding scale, 255 MiB + 11 MiB per pod, 100 MiB eviction threshold, 1 GiB + 10 % of the
//!   root volume);
//! - labels: those of the embedded catalog (instance type, family, size, arch, OS, region, the
//!   `gpu-autoscaler.dev/instance-gpu-*` family and, for NVIDIA, GPU Feature Discovery's
//!   `nvidia.com/gpu.{product,count,memory}` where the product name is known);
//! - offerings: per zone that offers the type, on-demand at the embedded (or overridden) list
//!   price when one is known, spot at the latest DescribeSpotPriceHistory price when the type
//!   supports spot. A type with no priced offering is left out: the planner cannot weigh it.
//!
//! # In detail
//!
//! Catalog: `DescribeInstanceTypes` (paginated; optionally narrowed by the settings'
//! `instance_types` patterns), `DescribeInstanceTypeOfferings` for zones, on-demand prices from the
//! embedded table (settings may override or add), spot prices from `DescribeSpotPriceHistory`
//! (latest per type and zone). GPUs from `GpuInfo` (NVIDIA → `nvidia.com/gpu`, AMD → `amd.com/gpu`,
//! Habana → `habana.ai/gaudi`), Neuron devices from `NeuronInfo` / `InferenceAcceleratorInfo`
//! (`aws.amazon.com/neuron`); max pods by the VPC CNI ENI formula on the default network card;
//! kubelet reserve from `providers::catalog::overhead`; memory less a VM overhead (7.5 %,
//! Karpenter's figure; the embedded catalog has none). Labels reproduce the embedded catalog's
//! (unit-tested on g5.xlarge). A type without any priced offering is left out. Cached for
//! `catalog_ttl_s` on a `Clock` (a `FakeClock` in tests); a node class narrows zones to its
//! subnets, architectures to its AMIs, and sets disk and max pods.

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::resources::names;
use autoscaler_core::{CapacityType, GpuSpec, InstanceType, Labels, Offering, Resources, labels};
use aws_sdk_ec2::types::{ArchitectureType, InstanceTypeInfo, UsageClassType};
use providers::catalog::overhead;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// The extended resource of Habana Gaudi accelerators (Intel's device plugin).
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
/// The extended resource of AWS Neuron devices (Inferentia, Trainium).
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";

/// Accelerators of an instance type as EC2 describes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceleratorFacts {
    /// Manufacturer as EC2 spells it (`NVIDIA`, `AMD`, `Habana`, `AWS`).
    pub manufacturer: String,
    /// Model as EC2 spells it (`A10G`, `Radeon Pro V520`, `Inferentia2`).
    pub name: String,
    /// Devices.
    pub count: u32,
    /// Memory per device in MiB.
    pub memory_mib: u64,
}

/// What the catalog needs of one `DescribeInstanceTypes` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeFacts {
    /// Instance type name.
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// vCPUs.
    pub vcpu: u32,
    /// Nominal memory in MiB.
    pub memory_mib: u64,
    /// Pods by the ENI formula, when EC2 gave the network limits.
    pub eni_max_pods: Option<u32>,
    /// GPUs or other accelerators.
    pub accelerator: Option<AcceleratorFacts>,
    /// Whether the type can be bought on demand.
    pub on_demand: bool,
    /// Whether the type can be bought as spot.
    pub spot: bool,
}

fn positive(v: Option<i32>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0)
}

impl TypeFacts {
    /// Keeps what matters of an EC2 description; `None` for types the autoscaler cannot run
    /// Linux nodes on (no x86_64 or arm64 support, such as Mac types, or incomplete data).
    pub fn from_sdk(info: &InstanceTypeInfo) -> Option<TypeFacts> {
        let name = info.instance_type()?.as_str().to_string();
        let archs = info.processor_info()?.supported_architectures();
        let arch = if archs.contains(&ArchitectureType::X8664) {
            "amd64"
        } else if archs.contains(&ArchitectureType::Arm64) {
            "arm64"
        } else {
            return None;
        };
        let vcpu = positive(info.v_cpu_info()?.default_v_cpus())?;
        let memory_mib = info
            .memory_info()?
            .size_in_mib()
            .and_then(|m| u64::try_from(m).ok())
            .filter(|m| *m > 0)?;
        let eni_max_pods = info.network_info().and_then(|n| {
            // The VPC CNI attaches ENIs on the default network card only.
            let default_card = n.default_network_card_index().unwrap_or(0);
            let enis = n
                .network_cards()
                .iter()
                .find(|c| c.network_card_index() == Some(default_card))
                .and_then(|c| positive(c.maximum_network_interfaces()))
                .or_else(|| positive(n.maximum_network_interfaces()))?;
            let ips = positive(n.ipv4_addresses_per_interface())?;
            Some(enis * (ips.saturating_sub(1)) + 2)
        });
        let usage = info.supported_usage_classes();
        Some(TypeFacts {
            name,
            arch: arch.to_string(),
            vcpu,
            memory_mib,
            eni_max_pods,
            accelerator: accelerator(info),
            on_demand: usage.is_empty() || usage.contains(&UsageClassType::OnDemand),
            spot: usage.contains(&UsageClassType::Spot),
        })
    }
}

fn accelerator(info: &InstanceTypeInfo) -> Option<AcceleratorFacts> {
    let sum = |counts: &mut dyn Iterator<Item = Option<i32>>| -> u32 {
        counts.map(positive).map(Option::unwrap_or_default).sum()
    };
    if let Some(g) = info.gpu_info().filter(|g| !g.gpus().is_empty()) {
        let first = &g.gpus()[0];
        return Some(AcceleratorFacts {
            manufacturer: first.manufacturer().unwrap_or("unknown").to_string(),
            name: first.name().unwrap_or("unknown").to_string(),
            count: sum(&mut g.gpus().iter().map(|d| d.count())),
            memory_mib: first
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or(0),
        })
        .filter(|a| a.count > 0);
    }
    if let Some(n) = info
        .neuron_info()
        .filter(|n| !n.neuron_devices().is_empty())
    {
        let first = &n.neuron_devices()[0];
        return Some(AcceleratorFacts {
            manufacturer: "AWS".into(),
            name: first.name().unwrap_or("neuron").to_string(),
            count: sum(&mut n.neuron_devices().iter().map(|d| d.count())),
            memory_mib: first
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or(0),
        })
        .filter(|a| a.count > 0);
    }
    // Older descriptions (inf1) list Inferentia only here.
    if let Some(a) = info
        .inference_accelerator_info()
        .filter(|a| !a.accelerators().is_empty())
    {
        let first = &a.accelerators()[0];
        return Some(AcceleratorFacts {
            manufacturer: first.manufacturer().unwrap_or("AWS").to_string(),
            name: first.name().unwrap_or("inferentia").to_string(),
            count: sum(&mut a.accelerators().iter().map(|d| d.count())),
            memory_mib: first
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or(0),
        })
        .filter(|a| a.count > 0);
    }
    None
}

/// A Kubernetes-label-safe, lower-case rendering of an EC2 name (`Radeon Pro V520` →
/// `radeon-pro-v520`).
pub fn label_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let t = out.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    t.chars().take(63).collect::<String>()
}

/// Names the embedded catalog knows for a GPU: its model key (`A100-40GB`) and GFD product
/// (`NVIDIA-A100-SXM4-40GB`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct KnownGpu {
    model: String,
    product: Option<String>,
}

/// Facts the embedded catalog adds to EC2's: list prices and GPU naming.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Embedded {
    /// On-demand USD per hour by instance type.
    pub on_demand: BTreeMap<String, f64>,
    /// (vendor, label-safe name, memory MiB) → names.
    gpus: BTreeMap<(String, String, u64), KnownGpu>,
}

impl Embedded {
    /// The embedded default catalog's AWS section, with `overrides` replacing or adding
    /// on-demand prices.
    pub fn load(overrides: &BTreeMap<String, f64>) -> Self {
        let mut e = Embedded::default();
        for t in providers::catalog::default_catalog_for(providers::catalog::AWS) {
            if let Some(p) = t
                .offerings
                .iter()
                .find(|o| o.capacity_type == CapacityType::OnDemand)
            {
                e.on_demand.insert(t.name.clone(), p.price);
            }
            if let (Some(g), Some(name)) = (&t.gpu, t.labels.get(labels::GPU_NAME)) {
                e.gpus.insert(
                    (g.vendor.clone(), name.clone(), g.memory_mib),
                    KnownGpu {
                        model: g.model.clone(),
                        product: t.labels.get(labels::NVIDIA_PRODUCT).cloned(),
                    },
                );
            }
        }
        for (t, p) in overrides {
            e.on_demand.insert(t.clone(), *p);
        }
        e
    }
}

/// Per-class and per-provider knobs of the conversion.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildOptions {
    /// Region (label).
    pub region: String,
    /// Root volume, the ephemeral-storage capacity.
    pub root_volume_gib: u32,
    /// Hypervisor share of memory, percent.
    pub vm_memory_overhead_percent: f64,
    /// Pods per node instead of the ENI formula.
    pub max_pods: Option<u32>,
    /// Zones the class can launch into; `None`: every zone.
    pub zones: Option<BTreeSet<String>>,
}

/// Where and at what price a type is sold: zones from DescribeInstanceTypeOfferings, spot
/// prices per zone from DescribeSpotPriceHistory, zone IDs from DescribeAvailabilityZones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Market {
    /// Zones per instance type.
    pub zones: BTreeMap<String, BTreeSet<String>>,
    /// Zone ID (`use1-az1`) per zone name, for requirements on `topology.k8s.aws/zone-id`.
    pub zone_ids: BTreeMap<String, String>,
    /// Latest spot price per (instance type, zone).
    pub spot: BTreeMap<(String, String), f64>,
}

/// The device resource for a manufacturer, if the autoscaler knows its device plugin.
fn device_resource(vendor: &str) -> Option<&'static str> {
    match vendor {
        "nvidia" => Some(names::NVIDIA_GPU),
        "amd" => Some(names::AMD_GPU),
        "habana" => Some(HABANA_GAUDI),
        "aws" => Some(AWS_NEURON),
        _ => None,
    }
}

/// Pods when EC2 gave no network limits: the embedded catalog's value, else kubelet's default.
fn fallback_max_pods(name: &str) -> u32 {
    providers::catalog::default()
        .get(name)
        .and_then(|t| u32::try_from(t.capacity.pods).ok())
        .unwrap_or(110)
}

impl TypeFacts {
    /// The type as the planner sees it for one node class; `None` when no offering has a price.
    pub fn to_instance_type(
        &self,
        market: &Market,
        embedded: &Embedded,
        opts: &BuildOptions,
    ) -> Option<InstanceType> {
        let offerings = self.offerings(market, embedded, opts);
        if offerings.is_empty() {
            return None;
        }
        let max_pods = opts
            .max_pods
            .or(self.eni_max_pods)
            .unwrap_or_else(|| fallback_max_pods(&self.name))
            .max(1);
        let nominal = i64::try_from(self.memory_mib).ok()?.checked_mul(MIB)?;
        // Whole MiB, rounded down: the kernel never sees a fraction of the reported size.
        let vm = (nominal as f64 * opts.vm_memory_overhead_percent / 100.0).ceil() as i64;
        let memory = (nominal - vm) / MIB * MIB;
        let root = i64::from(opts.root_volume_gib) * GIB;
        let mut capacity = Resources::new()
            .with("cpu", i64::from(self.vcpu) * 1000)
            .with("memory", memory)
            .with("ephemeral-storage", root)
            .with("pods", i64::from(max_pods));
        let overhead = Resources::new()
            .with("cpu", overhead::cpu_millis(self.vcpu))
            .with(
                "memory",
                overhead::eks_memory(max_pods) + overhead::EVICTION_MEMORY,
            )
            .with("ephemeral-storage", overhead::ephemeral_storage(root));

        let (family, size) = self.name.split_once('.').unwrap_or((&self.name, ""));
        let mut l = Labels::new();
        let mut put = |k: &str, v: String| {
            l.insert(k.to_string(), v);
        };
        put(labels::INSTANCE_TYPE, self.name.clone());
        put(labels::INSTANCE_FAMILY, family.to_string());
        if !size.is_empty() {
            put(labels::INSTANCE_SIZE, size.to_string());
        }
        put(labels::ARCH, self.arch.clone());
        put(labels::OS, "linux".into());
        put(labels::REGION, opts.region.clone());

        let gpu = self.accelerator.as_ref().and_then(|a| {
            let vendor = label_safe(&a.manufacturer);
            let resource = device_resource(&vendor)?;
            let short = label_safe(&a.name);
            let known = embedded
                .gpus
                .get(&(vendor.clone(), short.clone(), a.memory_mib));
            capacity.set(resource, i64::from(a.count));
            let spec = GpuSpec {
                vendor,
                model: known.map_or_else(|| a.name.replace(' ', "-"), |k| k.model.clone()),
                count: a.count,
                memory_mib: a.memory_mib,
                resource: resource.to_string(),
            };
            // The labels the embedded catalog gives its types, written by the same code.
            providers::common::add_gpu_labels(
                &mut l,
                &spec,
                providers::common::GpuNames {
                    short: &short,
                    product: known.and_then(|k| k.product.as_deref()),
                    gke_accelerator: None,
                },
            );
            Some(spec)
        });

        Some(InstanceType {
            name: self.name.clone(),
            arch: self.arch.clone(),
            capacity,
            overhead,
            gpu,
            labels: l,
            offerings,
        })
    }

    fn offerings(
        &self,
        market: &Market,
        embedded: &Embedded,
        opts: &BuildOptions,
    ) -> Vec<Offering> {
        let Some(zones) = market.zones.get(&self.name) else {
            return Vec::new();
        };
        let on_demand = embedded.on_demand.get(&self.name).copied();
        let mut out = Vec::new();
        for zone in zones {
            if opts.zones.as_ref().is_some_and(|z| !z.contains(zone)) {
                continue;
            }
            if self.spot
                && let Some(p) = market.spot.get(&(self.name.clone(), zone.clone()))
            {
                out.push(Offering {
                    zone: zone.clone(),
                    zone_id: market.zone_ids.get(zone).cloned(),
                    capacity_type: CapacityType::Spot,
                    price: *p,
                    available: true,
                });
            }
            if self.on_demand
                && let Some(p) = on_demand
            {
                out.push(Offering {
                    zone: zone.clone(),
                    zone_id: market.zone_ids.get(zone).cloned(),
                    capacity_type: CapacityType::OnDemand,
                    price: p,
                    available: true,
                });
            }
        }
        out
    }
}

/// Every type of `facts` that has a priced offering, sorted by name.
pub fn build(
    facts: &[TypeFacts],
    market: &Market,
    embedded: &Embedded,
    opts: &BuildOptions,
) -> Vec<InstanceType> {
    let mut out: Vec<InstanceType> = facts
        .iter()
        .filter_map(|f| f.to_instance_type(market, embedded, opts))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests;
