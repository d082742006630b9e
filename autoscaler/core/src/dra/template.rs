//! Devices for nodes that do not exist yet: the ResourceSlice the NVIDIA DRA driver
//! (`gpu.nvidia.com`) would publish on a node of an instance type, derived from the
//! catalog's [`GpuSpec`] (embedded AWS and GCP catalogs and the cloud catalogs alike).
//!
//! One device per GPU, named `gpu-<i>`, with the driver's attribute names: `type` = `"gpu"`,
//! `productName` (GPU Feature Discovery's `nvidia.com/gpu.product` label with its hyphens read
//! back as the spaces it replaced, else `NVIDIA <model>`), `architecture` and
//! `cudaComputeCapability` (a version) from the model's family (omitted for a model the table
//! below does not know), `index`, a synthetic `uuid`, and capacity `memory`.
//! `driverVersion` and `cudaDriverVersion` depend on the node image and are left out: a
//! selector on them fails on a template as it would on a node without them, unless the
//! NodePool says what its image installs (`spec.dra.attributes`, [`with_attributes`]).
//!
//! With `partitions` (a NodePool that shares GPUs with MIG), a MIG-capable GPU is published as
//! the driver's partitionable devices (KEP 4815): one counter set per GPU,
//! `gpu-<i>-counter-set`, with one counter per memory slice (`memory-slice-<k>` = 1) and
//! `compute-slices` = 7; the whole GPU consumes all of them, and every placement of every MIG
//! profile of the core's MIG table ([`crate::gpu::mig`]) is a device `gpu-<i>-mig-<profile>-<start>` (the profile's dots and plus as hyphens)
//! (`type` = `"mig"`, `profile`, `parentUUID`, the parent's product attributes, capacity
//! `memory`) consuming its memory slices and compute slices. A profile of `m` memory slices
//! that fits `n` times is placed at starts `0, m, 2m, ...` (`n` of them), which is NVIDIA's
//! placement rule for every profile of the table. Departures from the driver: the driver names
//! MIG devices by NVML profile id and counts multiprocessors rather than compute slices; the
//! catalog knows neither.

use std::collections::BTreeMap;

use super::{AttributeValue, CounterConsumption, CounterSet, Device, ResourceSlice, SliceNodes};
use crate::instance::{GpuSpec, InstanceType};
use crate::labels;
use crate::quantity::Quantity;

/// The NVIDIA DRA driver's name, also its attribute domain and its GPU device class's name.
pub const NVIDIA_DRIVER: &str = "gpu.nvidia.com";
/// The NVIDIA driver's MIG device class.
pub const NVIDIA_MIG_CLASS: &str = "mig.nvidia.com";

/// NVML's architecture name and the CUDA compute capability of a catalog GPU model, by family.
pub fn architecture(model: &str) -> Option<(&'static str, &'static str)> {
    let m = model.to_ascii_uppercase();
    let m = m
        .trim_start_matches("NVIDIA")
        .trim_start_matches(['-', ' ']);
    let m = m.trim_start_matches("TESLA").trim_start_matches(['-', ' ']);
    const TABLE: &[(&str, &str, &str)] = &[
        ("GB200", "Blackwell", "10.0.0"),
        ("B200", "Blackwell", "10.0.0"),
        ("H100", "Hopper", "9.0.0"),
        ("H200", "Hopper", "9.0.0"),
        ("L40", "Ada Lovelace", "8.9.0"),
        ("L4", "Ada Lovelace", "8.9.0"),
        ("A100", "Ampere", "8.0.0"),
        ("A10", "Ampere", "8.6.0"),
        ("T4", "Turing", "7.5.0"),
        ("V100", "Volta", "7.0.0"),
        ("P100", "Pascal", "6.0.0"),
        ("P4", "Pascal", "6.1.0"),
    ];
    TABLE
        .iter()
        .find(|(prefix, _, _)| m.starts_with(prefix))
        .map(|(_, arch, cc)| (*arch, *cc))
}

/// The NVIDIA driver's slice for a node named `node` of instance type `it`, or `None` when
/// the type has no NVIDIA GPU.
pub fn nvidia_slice(it: &InstanceType, node: &str, partitions: bool) -> Option<ResourceSlice> {
    let gpu = it
        .gpu
        .as_ref()
        .filter(|g| g.vendor == "nvidia" && g.count > 0)?;
    let product = it
        .labels
        .get(labels::NVIDIA_PRODUCT)
        .map(|p| p.replace('-', " "))
        .unwrap_or_else(|| format!("NVIDIA {}", gpu.model));
    let mig = if partitions {
        crate::gpu::mig::model_for(&gpu.model, gpu.memory_mib)
    } else {
        None
    };
    let mut slice = ResourceSlice {
        name: format!("{node}-{NVIDIA_DRIVER}"),
        driver: NVIDIA_DRIVER.into(),
        pool: node.into(),
        generation: 1,
        nodes: SliceNodes::Node(node.into()),
        devices: vec![],
        shared_counters: vec![],
    };
    for i in 0..gpu.count {
        let uuid = format!("GPU-{}-{i}", it.name);
        let mut common = BTreeMap::new();
        common.insert(
            "productName".into(),
            AttributeValue::String(product.clone()),
        );
        if let Some((arch, cc)) = architecture(&gpu.model) {
            common.insert("architecture".into(), AttributeValue::String(arch.into()));
            common.insert(
                "cudaComputeCapability".into(),
                AttributeValue::Version(cc.into()),
            );
        }
        let mut attributes = common.clone();
        attributes.insert("type".into(), AttributeValue::String("gpu".into()));
        attributes.insert("index".into(), AttributeValue::Int(i64::from(i)));
        attributes.insert("uuid".into(), AttributeValue::String(uuid.clone()));
        let mut whole = Device {
            name: format!("gpu-{i}"),
            attributes,
            capacity: memory(gpu),
            consumes_counters: vec![],
        };
        if let Some(model) = mig {
            let set = format!("gpu-{i}-counter-set");
            let mut all: BTreeMap<String, Quantity> = (0..8)
                .map(|k| (format!("memory-slice-{k}"), Quantity::from_units(1)))
                .collect();
            all.insert("compute-slices".into(), Quantity::from_units(7));
            slice.shared_counters.push(CounterSet {
                name: set.clone(),
                counters: all.clone(),
            });
            whole.consumes_counters.push(CounterConsumption {
                counter_set: set.clone(),
                counters: all,
            });
            slice.devices.push(whole);
            for p in model.profiles {
                for n in 0..p.max_instances {
                    let start = n * p.memory_slices;
                    let mut counters: BTreeMap<String, Quantity> = (start..start + p.memory_slices)
                        .map(|k| (format!("memory-slice-{k}"), Quantity::from_units(1)))
                        .collect();
                    counters.insert(
                        "compute-slices".into(),
                        Quantity::from_units(i64::from(p.compute_slices)),
                    );
                    let mut attributes = common.clone();
                    attributes.insert("type".into(), AttributeValue::String("mig".into()));
                    attributes.insert("profile".into(), AttributeValue::String(p.name.into()));
                    attributes.insert("parentUUID".into(), AttributeValue::String(uuid.clone()));
                    attributes.insert(
                        "uuid".into(),
                        AttributeValue::String(format!("MIG-{}-{i}-{}-{start}", it.name, p.name)),
                    );
                    slice.devices.push(Device {
                        // Device names are DNS labels: no dots or pluses.
                        name: format!("gpu-{i}-mig-{}-{start}", p.name.replace(['.', '+'], "-")),
                        attributes,
                        capacity: [(
                            "memory".to_string(),
                            Quantity::from_units(p.memory_mib as i64 * 1024 * 1024),
                        )]
                        .into(),
                        consumes_counters: vec![CounterConsumption {
                            counter_set: set.clone(),
                            counters,
                        }],
                    });
                }
            }
        } else {
            slice.devices.push(whole);
        }
    }
    Some(slice)
}

/// Gives every device of `slice` the attributes `attributes` (a NodePool's
/// `spec.dra.attributes`: what its node image installs), replacing predicted ones of the same
/// name. A name in the slice's driver domain (`gpu.nvidia.com/driverVersion`) is stored short
/// (`driverVersion`), as the driver publishes its own attributes, so it replaces the predicted
/// value rather than standing beside it.
pub fn with_attributes(slice: &mut ResourceSlice, attributes: &BTreeMap<String, AttributeValue>) {
    if attributes.is_empty() {
        return;
    }
    let own = format!("{}/", slice.driver);
    for d in &mut slice.devices {
        for (name, value) in attributes {
            let name = name.strip_prefix(own.as_str()).unwrap_or(name);
            d.attributes.insert(name.to_string(), value.clone());
        }
    }
}

/// Longest attribute name after its domain (`resource.k8s.io/v1`'s limit).
pub const MAX_ATTRIBUTE_NAME: usize = 32;
/// Longest string or version attribute value (`resource.k8s.io/v1`'s limit).
pub const MAX_ATTRIBUTE_VALUE: usize = 64;

/// Checks one attribute a NodePool adds to its devices as the API server checks a
/// ResourceSlice's: the name a C identifier of at most [`MAX_ATTRIBUTE_NAME`] characters,
/// optionally after a DNS subdomain and `/`; a string or version of at most
/// [`MAX_ATTRIBUTE_VALUE`] characters, a version valid semantic versioning 2.0.0.
///
/// # Errors
/// What is wrong, in words.
pub fn check_attribute(name: &str, value: &AttributeValue) -> Result<(), String> {
    let (domain, short) = match name.rsplit_once('/') {
        Some((d, s)) => (Some(d), s),
        None => (None, name),
    };
    let identifier = short.len() <= MAX_ATTRIBUTE_NAME
        && short
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && short.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        return Err(format!(
            "name {short:?} must be a C identifier (letters, digits, _; not starting with a digit) of at most {MAX_ATTRIBUTE_NAME} characters"
        ));
    }
    if let Some(d) = domain {
        let label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if d.len() > 63 || !d.split('.').all(label) {
            return Err(format!(
                "domain {d:?} must be a DNS subdomain (lower-case labels) of at most 63 characters"
            ));
        }
    }
    match value {
        AttributeValue::String(v) | AttributeValue::Version(v) if v.len() > MAX_ATTRIBUTE_VALUE => {
            Err(format!(
                "value is {} characters, more than {MAX_ATTRIBUTE_VALUE}",
                v.len()
            ))
        }
        AttributeValue::Version(v) => semver::Version::parse(v)
            .map(|_| ())
            .map_err(|e| format!("version {v:?} is not semantic versioning 2.0.0: {e}")),
        _ => Ok(()),
    }
}

fn memory(gpu: &GpuSpec) -> BTreeMap<String, Quantity> {
    [(
        "memory".to_string(),
        Quantity::from_units(gpu.memory_mib as i64 * 1024 * 1024),
    )]
    .into()
}

/// The NVIDIA driver's DeviceClasses as its Helm chart installs them: `gpu.nvidia.com`
/// (whole GPUs, standing for the extended resource `nvidia.com/gpu`) and `mig.nvidia.com`
/// (MIG devices).
pub fn nvidia_classes() -> Vec<super::DeviceClass> {
    let class = |name: &str, ty: &str, extended: Option<&str>| super::DeviceClass {
        name: name.into(),
        selectors: vec![format!(
            "device.driver == '{NVIDIA_DRIVER}' && device.attributes['{NVIDIA_DRIVER}'].type == '{ty}'"
        )],
        extended_resource_name: extended.map(str::to_string),
    };
    vec![
        class(
            NVIDIA_DRIVER,
            "gpu",
            Some(crate::resources::names::NVIDIA_GPU),
        ),
        class(NVIDIA_MIG_CLASS, "mig", None),
    ]
}

#[cfg(test)]
mod tests;
