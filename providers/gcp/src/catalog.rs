//! From Compute Engine's machine and accelerator types to the planner's [`InstanceType`]s.
//!
//! Two steps, both pure: [`MachineFacts::from_api`] and [`AcceleratorFacts::from_api`] keep what
//! matters of `machineTypes.list` / `acceleratorTypes.list` entries; [`build`] turns the facts of
//! every zone plus the price table into instance types for one node class.
//!
//! What is offered, as documented for users:
//! - **Built-in GPUs**: accelerator-optimized machine types whose `accelerators[]` names a GPU
//!   (A2 highgpu/megagpu/ultragpu, A3 highgpu/megagpu/ultragpu, A4, G2, G4), one type each.
//! - **Attachable GPUs**: every N1 machine type combined with every GPU attachable to N1 that
//!   the zone lists (`nvidia-tesla-t4`, `-v100`, `-p100`, `-p4`), in the counts Compute Engine
//!   allows for that machine shape ([`n1_rules`]: 1, 2, 4 or 8 devices within the vCPU and
//!   memory limits per count), named `<machine>-<gpu>x<count>` as in the embedded catalog
//!   (`n1-standard-8-t4x1`). The launcher splits the name back ([`split_attached`]). L4 is not
//!   attachable to N1 on Compute Engine; it comes only with G2.
//! - **CPU-only types** of the zone, when priced.
//! - Capacity: vCPUs, nominal memory (GCE's memoryMb is MiB), the class's boot disk as
//!   ephemeral storage, the class's max pods, and one `nvidia.com/gpu` per GPU.
//! - Overhead: the GKE-style reserve of `providers::catalog::overhead`.
//! - Labels: those of the embedded catalog (instance type, family, size, arch, OS, region, the
//!   `gpu-autoscaler.dev/instance-gpu-*` family, GPU Feature Discovery's
//!   `nvidia.com/gpu.{product,count,memory}` and `cloud.google.com/gke-accelerator` set to the
//!   accelerator type's name, which is GKE's value).
//! - Offerings: per zone listing the machine type (and, for N1, the accelerator type). Prices
//!   come from the embedded catalog's GCP table (on-demand and spot, its region's list prices,
//!   used for every region), then the settings' overrides, then for N1 combinations not in the
//!   table the machine's vCPU and memory price plus the GPU's attach price ([`n1_prices`]), spot
//!   at the catalog's spot factor. A type with no price is left out (the planner cannot weigh
//!   it) and reported in [`Built::unpriced`].
//!
//! # In detail
//!
//! Catalog: `machineTypes.aggregatedList` (or `.list` per configured zone) and
//! `acceleratorTypes.list` per zone. Built-in-GPU families (A2, A3, A4, G2, G4) come as listed; N1
//! machines are combined with every attachable GPU (T4, V100, P100, P4) in the counts Compute
//! Engine allows for the shape, named `<machine>-<gpu>x<count>` like the embedded catalog. Prices:
//! the embedded table, then settings overrides, then N1 component prices (machine vCPU/GiB + GPU)
//! that reproduce the table's N1 entries exactly (unit-tested). Types without a price are left out
//! and named by `catalog --provider gcp`. Labels come from `providers::common`, the same helpers
//! that reproduce the embedded catalog's labels (tested over every embedded type), plus
//! `cloud.google.com/gke-accelerator` = the accelerator type name.

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::resources::names;
use autoscaler_core::{CapacityType, GpuSpec, InstanceType, Offering, Resources, labels};
use google_cloud_compute_v1::model;
use providers::catalog::overhead;
use providers::common::{GpuNames, add_gpu_labels, instance_labels};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// The last path segment of a Compute resource URL or partial URL (`zones/us-central1-a` →
/// `us-central1-a`); the string itself when it has no `/`.
pub fn last_segment(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// What the catalog needs of one `machineTypes.list` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineFacts {
    /// Machine type name (`n1-standard-8`, `a2-highgpu-1g`).
    pub name: String,
    /// Zone it is listed in.
    pub zone: String,
    /// vCPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// Built-in accelerators: type name (`nvidia-tesla-a100`) and count.
    pub accelerator: Option<(String, u32)>,
}

fn positive(v: Option<i32>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0)
}

impl MachineFacts {
    /// Keeps what matters of an API entry; `None` for deprecated or incomplete entries and
    /// shared-core types (e2-micro and friends cannot carry a kubelet and GPU agents).
    pub fn from_api(m: &model::MachineType, zone: &str) -> Option<MachineFacts> {
        if m.deprecated
            .as_ref()
            .and_then(|d| d.state.as_ref())
            .is_some()
        {
            return None;
        }
        if m.is_shared_cpu == Some(true) {
            return None;
        }
        let name = m.name.clone()?;
        let vcpu = positive(m.guest_cpus)?;
        let memory_mib = u64::from(positive(m.memory_mb)?);
        let arch = match m.architecture.as_ref().map(|a| a.name()) {
            Some(Some("ARM64")) => "arm64",
            _ => "amd64",
        };
        let accelerator = m.accelerators.iter().find_map(|a| {
            Some((
                last_segment(a.guest_accelerator_type.as_deref()?).to_string(),
                positive(a.guest_accelerator_count)?,
            ))
        });
        let zone = m.zone.as_deref().map_or(zone, last_segment).to_string();
        Some(MachineFacts {
            name,
            zone,
            vcpu,
            memory_mib,
            arch: arch.to_string(),
            accelerator,
        })
    }
}

/// What the catalog needs of one `acceleratorTypes.list` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceleratorFacts {
    /// Accelerator type name (`nvidia-tesla-t4`).
    pub name: String,
    /// Zone it is listed in.
    pub zone: String,
    /// The most cards one instance may carry.
    pub max_cards: u32,
}

impl AcceleratorFacts {
    /// Keeps what matters of an API entry; `None` for deprecated or incomplete entries.
    pub fn from_api(a: &model::AcceleratorType, zone: &str) -> Option<AcceleratorFacts> {
        if a.deprecated
            .as_ref()
            .and_then(|d| d.state.as_ref())
            .is_some()
        {
            return None;
        }
        Some(AcceleratorFacts {
            name: a.name.clone()?,
            zone: a.zone.as_deref().map_or(zone, last_segment).to_string(),
            max_cards: positive(a.maximum_cards_per_instance).unwrap_or(8),
        })
    }
}

/// One allowed N1 + GPU combination size: `count` devices on a machine of at most `max_vcpu`
/// vCPUs and `max_memory_gib` GiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachRule {
    /// Devices attached.
    pub count: u32,
    /// Largest vCPU count allowed with that many devices.
    pub max_vcpu: u32,
    /// Largest memory allowed with that many devices.
    pub max_memory_gib: u32,
}

/// A GPU attachable to N1 machines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attachable {
    /// Accelerator type name (`nvidia-tesla-t4`).
    pub accelerator: &'static str,
    /// Short name in type names (`t4` in `n1-standard-8-t4x1`).
    pub short: &'static str,
    /// The allowed counts with their machine limits.
    pub rules: &'static [AttachRule],
    /// On-demand USD per hour per device (us-central1 list price).
    pub on_demand: f64,
}

const fn rule(count: u32, max_vcpu: u32, max_memory_gib: u32) -> AttachRule {
    AttachRule {
        count,
        max_vcpu,
        max_memory_gib,
    }
}

/// GPUs attachable to N1 machines, with Compute Engine's published limits per count
/// ("GPU machine types: N1 general-purpose machine type", vCPUs and memory per GPU count).
pub fn n1_rules() -> &'static [Attachable] {
    const T4: &[AttachRule] = &[rule(1, 48, 312), rule(2, 48, 312), rule(4, 96, 624)];
    const V100: &[AttachRule] = &[
        rule(1, 12, 78),
        rule(2, 24, 156),
        rule(4, 48, 312),
        rule(8, 96, 624),
    ];
    const P100: &[AttachRule] = &[rule(1, 16, 104), rule(2, 32, 208), rule(4, 64, 208)];
    const P4: &[AttachRule] = &[rule(1, 24, 156), rule(2, 48, 312), rule(4, 96, 624)];
    const ALL: &[Attachable] = &[
        Attachable {
            accelerator: "nvidia-tesla-t4",
            short: "t4",
            rules: T4,
            on_demand: 0.35,
        },
        Attachable {
            accelerator: "nvidia-tesla-v100",
            short: "v100",
            rules: V100,
            on_demand: 2.48,
        },
        Attachable {
            accelerator: "nvidia-tesla-p100",
            short: "p100",
            rules: P100,
            on_demand: 1.46,
        },
        Attachable {
            accelerator: "nvidia-tesla-p4",
            short: "p4",
            rules: P4,
            on_demand: 0.60,
        },
    ];
    ALL
}

/// N1 machine list prices in us-central1 (USD per hour): per vCPU and per GiB of memory. With
/// [`Attachable::on_demand`] they reproduce the embedded catalog's N1 + GPU prices exactly
/// (n1-standard-8 + one T4 = 8 x 0.031611 + 30 x 0.004237 + 0.35 = 0.729998).
pub fn n1_prices() -> (f64, f64) {
    (0.031611, 0.004237)
}

/// The machine type, GPU short name and count of an attached-GPU type name
/// (`n1-standard-8-t4x1` → `("n1-standard-8", attachable T4, 1)`); `None` for other names.
pub fn split_attached(name: &str) -> Option<(&str, &'static Attachable, u32)> {
    let (machine, suffix) = name.rsplit_once('-')?;
    if !machine.starts_with("n1-") {
        return None;
    }
    let (short, count) = suffix.rsplit_once('x')?;
    let count: u32 = count.parse().ok()?;
    let a = n1_rules().iter().find(|a| a.short == short)?;
    a.rules
        .iter()
        .any(|r| r.count == count)
        .then_some((machine, a, count))
}

/// The name of an N1 machine with `count` devices of `a` attached.
pub fn attached_name(machine: &str, a: &Attachable, count: u32) -> String {
    format!("{machine}-{}x{count}", a.short)
}

/// How a GPU is named and sized: from the embedded catalog's GCP types, else built in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// Vendor (`nvidia`).
    pub vendor: String,
    /// Model key of the embedded catalog (`A100-80GB`).
    pub model: String,
    /// Short label name (`a100`).
    pub short: String,
    /// Memory per device in MiB.
    pub memory_mib: u64,
    /// GPU Feature Discovery product name.
    pub product: Option<String>,
}

/// Prices and GPU naming: the embedded catalog's GCP section plus overrides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Embedded {
    /// On-demand USD per hour by type name.
    pub on_demand: BTreeMap<String, f64>,
    /// Spot USD per hour by type name.
    pub spot: BTreeMap<String, f64>,
    /// The catalog's spot price as a share of on-demand, for derived prices.
    pub spot_factor: f64,
    /// GPU naming by accelerator type name (`nvidia-tesla-t4`).
    pub gpus: BTreeMap<String, GpuInfo>,
}

/// GPUs Compute Engine offers that the embedded catalog has no GCP type for.
fn builtin_gpus() -> Vec<(&'static str, GpuInfo)> {
    let g = |model: &str, short: &str, memory_mib: u64, product: &str| GpuInfo {
        vendor: "nvidia".into(),
        model: model.into(),
        short: short.into(),
        memory_mib,
        product: Some(product.into()),
    };
    vec![
        (
            "nvidia-tesla-p100",
            g("P100", "p100", 16384, "Tesla-P100-PCIE-16GB"),
        ),
        ("nvidia-tesla-p4", g("P4", "p4", 7680, "Tesla-P4")),
        ("nvidia-b200", g("B200", "b200", 183359, "NVIDIA-B200")),
        (
            "nvidia-rtx-pro-6000",
            g(
                "RTX-PRO-6000",
                "rtx-pro-6000",
                97887,
                "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            ),
        ),
    ]
}

impl Embedded {
    /// The embedded default catalog's GCP section, with price overrides replacing or adding
    /// entries.
    pub fn load(on_demand: &BTreeMap<String, f64>, spot: &BTreeMap<String, f64>) -> Self {
        let mut e = Embedded {
            spot_factor: 0.4,
            ..Embedded::default()
        };
        let mut factors = Vec::new();
        for t in providers::catalog::default_catalog_for(providers::catalog::GCP) {
            let price = |c: CapacityType| {
                t.offerings
                    .iter()
                    .find(|o| o.capacity_type == c)
                    .map(|o| o.price)
            };
            if let Some(p) = price(CapacityType::OnDemand) {
                e.on_demand.insert(t.name.clone(), p);
                if let Some(s) = price(CapacityType::Spot) {
                    e.spot.insert(t.name.clone(), s);
                    // N1 combinations carry no published spot price, so their spot price is the
                    // catalog's factor; recover it rather than copy the number.
                    if split_attached(&t.name).is_some() {
                        factors.push(s / p);
                    }
                }
            }
            if let (Some(g), Some(accel)) = (&t.gpu, t.labels.get(labels::GKE_ACCELERATOR)) {
                e.gpus.entry(accel.clone()).or_insert_with(|| GpuInfo {
                    vendor: g.vendor.clone(),
                    model: g.model.clone(),
                    short: t.labels.get(labels::GPU_NAME).cloned().unwrap_or_default(),
                    memory_mib: g.memory_mib,
                    product: t.labels.get(labels::NVIDIA_PRODUCT).cloned(),
                });
            }
        }
        if let Some(f) = factors.first() {
            e.spot_factor = (f * 1e3).round() / 1e3;
        }
        for (accel, info) in builtin_gpus() {
            e.gpus.entry(accel.to_string()).or_insert(info);
        }
        e.on_demand
            .extend(on_demand.iter().map(|(k, v)| (k.clone(), *v)));
        e.spot.extend(spot.iter().map(|(k, v)| (k.clone(), *v)));
        e
    }

    /// The GPU behind an accelerator type name; `None` for one this crate does not know (its
    /// memory, which selectors use, would be a guess).
    pub fn gpu(&self, accelerator: &str) -> Option<&GpuInfo> {
        self.gpus.get(accelerator)
    }

    /// On-demand and spot price of a type, from the table, else (N1 machines, alone or with
    /// attached GPUs) from the machine's and the GPUs' component prices; spot at the catalog's
    /// factor where the table has none.
    pub fn prices(&self, name: &str, machine: Option<&MachineFacts>) -> (Option<f64>, Option<f64>) {
        let on_demand = self.on_demand.get(name).copied().or_else(|| {
            let m = machine?;
            let gpus = match split_attached(name) {
                Some((machine_name, a, count)) if machine_name == m.name => {
                    f64::from(count) * a.on_demand
                }
                None if name == m.name && name.starts_with("n1-") => 0.0,
                _ => return None,
            };
            let (per_cpu, per_gib) = n1_prices();
            let p = f64::from(m.vcpu) * per_cpu + (m.memory_mib as f64 / 1024.0) * per_gib + gpus;
            Some((p * 1e6).round() / 1e6)
        });
        let spot = self
            .spot
            .get(name)
            .copied()
            .or_else(|| on_demand.map(|p| (p * self.spot_factor * 1e6).round() / 1e6));
        (on_demand, spot)
    }
}

/// Per-class and per-provider knobs of the conversion.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildOptions {
    /// Region (label).
    pub region: String,
    /// Boot disk, the ephemeral-storage capacity.
    pub boot_disk_gib: u32,
    /// Pods per node.
    pub max_pods: u32,
    /// Offer spot.
    pub spot: bool,
}

/// The instance types of one build, and what was left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Built {
    /// Instance types, sorted by name.
    pub types: Vec<InstanceType>,
    /// Types left out for lack of a price, sorted.
    pub unpriced: Vec<String>,
    /// Types left out because their accelerator is unknown, sorted.
    pub unknown_accelerators: Vec<String>,
}

/// One candidate type before pricing: the name, the machine, and its GPUs if any.
struct Shape<'a> {
    name: String,
    machine: &'a MachineFacts,
    accelerator: Option<(String, u32)>,
}

fn instance_type(
    shape: &Shape<'_>,
    zones: &BTreeSet<String>,
    embedded: &Embedded,
    opts: &BuildOptions,
    out: &mut Built,
) {
    let m = shape.machine;
    let (on_demand, spot) = embedded.prices(&shape.name, Some(m));
    let Some(on_demand) = on_demand else {
        out.unpriced.push(shape.name.clone());
        return;
    };
    let memory = i64::try_from(m.memory_mib).unwrap_or(i64::MAX / MIB) * MIB;
    let root = i64::from(opts.boot_disk_gib) * GIB;
    let mut capacity = Resources::new()
        .with("cpu", i64::from(m.vcpu) * 1000)
        .with("memory", memory)
        .with("ephemeral-storage", root)
        .with("pods", i64::from(opts.max_pods.max(1)));
    let overhead = Resources::new()
        .with("cpu", overhead::cpu_millis(m.vcpu))
        .with(
            "memory",
            overhead::gke_memory(memory) + overhead::EVICTION_MEMORY,
        )
        .with("ephemeral-storage", overhead::ephemeral_storage(root));
    // Family and size split at the first dash, as the embedded catalog does.
    let (family, size) = shape.name.split_once('-').unwrap_or((&shape.name, ""));
    let mut l = instance_labels(&shape.name, family, size, &m.arch, &opts.region);
    let gpu = match &shape.accelerator {
        None => None,
        Some((accel, count)) => {
            let Some(info) = embedded.gpu(accel) else {
                out.unknown_accelerators.push(shape.name.clone());
                return;
            };
            let spec = GpuSpec {
                vendor: info.vendor.clone(),
                model: info.model.clone(),
                count: *count,
                memory_mib: info.memory_mib,
                resource: names::NVIDIA_GPU.to_string(),
            };
            capacity.set(names::NVIDIA_GPU, i64::from(*count));
            add_gpu_labels(
                &mut l,
                &spec,
                GpuNames {
                    short: &info.short,
                    product: info.product.as_deref(),
                    gke_accelerator: Some(accel),
                },
            );
            Some(spec)
        }
    };
    let mut offerings = Vec::new();
    for zone in zones {
        if opts.spot
            && let Some(p) = spot
        {
            offerings.push(Offering {
                zone: zone.clone(),
                zone_id: None,
                capacity_type: CapacityType::Spot,
                price: p,
                available: true,
            });
        }
        offerings.push(Offering {
            zone: zone.clone(),
            zone_id: None,
            capacity_type: CapacityType::OnDemand,
            price: on_demand,
            available: true,
        });
    }
    out.types.push(InstanceType {
        name: shape.name.clone(),
        arch: m.arch.clone(),
        capacity,
        overhead,
        gpu,
        labels: l,
        offerings,
    });
}

/// Every priced type the zones offer: built-in-GPU and CPU machine types as listed, N1 machines
/// with each attachable GPU in each allowed count. `machines` and `accelerators` hold the
/// entries of every zone (one entry per zone a type is listed in).
pub fn build(
    machines: &[MachineFacts],
    accelerators: &[AcceleratorFacts],
    embedded: &Embedded,
    opts: &BuildOptions,
) -> Built {
    // name -> (facts of the first zone listing it, zones)
    let mut by_name: BTreeMap<&str, (&MachineFacts, BTreeSet<String>)> = BTreeMap::new();
    for m in machines {
        by_name
            .entry(m.name.as_str())
            .or_insert_with(|| (m, BTreeSet::new()))
            .1
            .insert(m.zone.clone());
    }
    let mut accel_zones: BTreeMap<&str, BTreeMap<&str, u32>> = BTreeMap::new();
    for a in accelerators {
        accel_zones
            .entry(a.name.as_str())
            .or_default()
            .insert(a.zone.as_str(), a.max_cards);
    }
    let mut out = Built::default();
    for (name, (m, zones)) in &by_name {
        instance_type(
            &Shape {
                name: (*name).to_string(),
                machine: m,
                accelerator: m.accelerator.clone(),
            },
            zones,
            embedded,
            opts,
            &mut out,
        );
        if !name.starts_with("n1-") || m.accelerator.is_some() {
            continue;
        }
        for a in n1_rules() {
            let Some(listed) = accel_zones.get(a.accelerator) else {
                continue;
            };
            for r in a.rules {
                if m.vcpu > r.max_vcpu || m.memory_mib > u64::from(r.max_memory_gib) * 1024 {
                    continue;
                }
                let ok: BTreeSet<String> = zones
                    .iter()
                    .filter(|z| listed.get(z.as_str()).is_some_and(|max| r.count <= *max))
                    .cloned()
                    .collect();
                if ok.is_empty() {
                    continue;
                }
                instance_type(
                    &Shape {
                        name: attached_name(name, a, r.count),
                        machine: m,
                        accelerator: Some((a.accelerator.to_string(), r.count)),
                    },
                    &ok,
                    embedded,
                    opts,
                    &mut out,
                );
            }
        }
    }
    out.types.sort_by(|a, b| a.name.cmp(&b.name));
    out.unpriced.sort();
    out.unknown_accelerators.sort();
    out
}

#[cfg(test)]
mod tests;
