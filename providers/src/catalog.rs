//! The embedded default catalog and its loader.
//!
//! `providers/catalog/default-catalog.yaml` is the project's own file of public facts about
//! common AWS and GCP instance types (its header states the conventions). [`Catalog::parse`]
//! turns such a file into core [`InstanceType`]s:
//!
//! - capacity: `vcpu` cores, `memory_mib`, `max_pods` pods, the provider's root volume as
//!   ephemeral storage, and one unit of the device resource (`nvidia.com/gpu`, `amd.com/gpu`,
//!   `aws.amazon.com/neuron`) per GPU;
//! - overhead: kubelet/system reserve and eviction thresholds, see [`overhead`];
//! - labels: instance type, family and size, architecture, OS, region; for GPUs the
//!   provider-neutral `gpu-autoscaler.dev/instance-gpu-*` labels, GPU Feature Discovery's
//!   `nvidia.com/gpu.{product,memory,count}` for NVIDIA, and `cloud.google.com/gke-accelerator`
//!   on GCP;
//! - offerings: every zone of the region, spot and on-demand.
//!
//! A user may point the autoscaler at a catalog file of the same shape; errors name the entry
//! and the field.

pub mod overhead;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use autoscaler_core::{CapacityType, GpuSpec, InstanceType, Labels, Offering, Resources, labels};
use serde::Deserialize;
use thiserror::Error;

/// The embedded default catalog file.
pub const DEFAULT_CATALOG_YAML: &str = include_str!("../catalog/default-catalog.yaml");

/// Provider key of Google Cloud in catalog files; its GPU types get the GKE accelerator label.
pub const GCP: &str = "gcp";
/// Provider key of AWS in catalog files.
pub const AWS: &str = "aws";

/// A catalog file that could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CatalogError {
    /// The file is not YAML of the catalog's shape (the message carries line and column).
    #[error("catalog does not parse: {0}")]
    Parse(String),
    /// The file could not be read, or is too large to be a catalog.
    #[error("{0}")]
    Read(String),
    /// An entry parsed but holds a value that cannot be right.
    #[error("catalog entry {entry:?}, field {field}: {why}")]
    Invalid {
        /// Entry name (instance type, GPU model or provider).
        entry: String,
        /// Field name.
        field: String,
        /// What is wrong.
        why: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    gpus: BTreeMap<String, GpuModel>,
    providers: BTreeMap<String, Section>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuModel {
    vendor: String,
    name: String,
    memory_mib: u64,
    #[serde(default)]
    product: Option<String>,
    #[serde(default)]
    gke_accelerator: Option<String>,
    #[serde(default)]
    resource: Option<String>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum OverheadStyle {
    Eks,
    Gke,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    region: String,
    zones: Vec<String>,
    spot_factor: f64,
    overhead: OverheadStyle,
    #[serde(default)]
    max_pods: Option<u32>,
    root_volume_gib: u32,
    types: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    vcpu: u32,
    memory_mib: u64,
    #[serde(default)]
    arch: Option<String>,
    #[serde(default)]
    max_pods: Option<u32>,
    on_demand: f64,
    #[serde(default)]
    spot: Option<f64>,
    #[serde(default)]
    gpu: Option<EntryGpu>,
    #[serde(default)]
    gke_accelerator: Option<String>,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    zones: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryGpu {
    model: String,
    count: u32,
}

/// One loaded instance type with where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogType {
    /// Provider key (`aws`, `gcp`).
    pub provider: String,
    /// Region its offerings are in.
    pub region: String,
    /// The instance type in the core's vocabulary.
    pub instance_type: InstanceType,
}

/// A loaded catalog, in file order (providers by key, then entries as written).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Catalog {
    types: Vec<CatalogType>,
}

fn invalid(entry: &str, field: &str, why: impl Into<String>) -> CatalogError {
    CatalogError::Invalid {
        entry: entry.to_string(),
        field: field.to_string(),
        why: why.into(),
    }
}

/// Kubernetes label values: at most 63 characters, alphanumerics and `-_.` inside.
fn check_label_value(entry: &str, field: &str, v: &str) -> Result<(), CatalogError> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
        && v.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(invalid(
            entry,
            field,
            format!("{v:?} is not a valid Kubernetes label value"),
        ))
    }
}

fn check_price(entry: &str, field: &str, price: f64) -> Result<(), CatalogError> {
    if price.is_finite() && price > 0.0 {
        Ok(())
    } else {
        Err(invalid(
            entry,
            field,
            format!("price must be a positive number of USD per hour, got {price}"),
        ))
    }
}

/// Family and size from the name: AWS `p4d.24xlarge` splits at the dot, GCP `a2-highgpu-8g` at
/// the first dash.
fn family_and_size(name: &str) -> (&str, &str) {
    name.split_once('.')
        .or_else(|| name.split_once('-'))
        .unwrap_or((name, ""))
}

/// Rounds a derived price to a millionth of a dollar so that printed catalogs stay readable.
fn round_price(p: f64) -> f64 {
    (p * 1e6).round() / 1e6
}

fn default_resource(vendor: &str) -> Option<&'static str> {
    match vendor {
        "nvidia" => Some(autoscaler_core::resources::names::NVIDIA_GPU),
        "amd" => Some(autoscaler_core::resources::names::AMD_GPU),
        _ => None,
    }
}

fn check_gpu_models(gpus: &BTreeMap<String, GpuModel>) -> Result<(), CatalogError> {
    for (model, g) in gpus {
        check_label_value(model, "gpus", model)?;
        check_label_value(model, "vendor", &g.vendor)?;
        check_label_value(model, "name", &g.name)?;
        if g.memory_mib == 0 {
            return Err(invalid(model, "memory_mib", "must be positive"));
        }
        if let Some(p) = &g.product {
            check_label_value(model, "product", p)?;
        }
        if let Some(a) = &g.gke_accelerator {
            check_label_value(model, "gke_accelerator", a)?;
        }
        if g.resource.is_none() && default_resource(&g.vendor).is_none() {
            return Err(invalid(
                model,
                "resource",
                format!(
                    "vendor {:?} has no default device resource; name it (e.g. aws.amazon.com/neuron)",
                    g.vendor
                ),
            ));
        }
    }
    Ok(())
}

fn check_section(provider: &str, s: &Section) -> Result<(), CatalogError> {
    check_label_value(provider, "region", &s.region)?;
    if s.zones.is_empty() {
        return Err(invalid(provider, "zones", "at least one zone is needed"));
    }
    for z in &s.zones {
        check_label_value(provider, "zones", z)?;
    }
    if !(s.spot_factor > 0.0 && s.spot_factor <= 1.0) {
        return Err(invalid(
            provider,
            "spot_factor",
            format!("must be in (0, 1], got {}", s.spot_factor),
        ));
    }
    if s.root_volume_gib == 0 {
        return Err(invalid(provider, "root_volume_gib", "must be positive"));
    }
    Ok(())
}

fn build(
    provider: &str,
    s: &Section,
    e: &Entry,
    gpus: &BTreeMap<String, GpuModel>,
) -> Result<CatalogType, CatalogError> {
    let name = e.name.as_str();
    check_label_value(name, "name", name)?;
    if e.vcpu == 0 {
        return Err(invalid(name, "vcpu", "must be positive"));
    }
    if e.memory_mib == 0 {
        return Err(invalid(name, "memory_mib", "must be positive"));
    }
    let arch = e.arch.as_deref().unwrap_or("amd64");
    if !matches!(arch, "amd64" | "arm64") {
        return Err(invalid(
            name,
            "arch",
            format!("{arch:?} is neither amd64 nor arm64"),
        ));
    }
    let max_pods = e.max_pods.or(s.max_pods).ok_or_else(|| {
        invalid(
            name,
            "max_pods",
            format!("missing, and provider {provider} has no default"),
        )
    })?;
    if max_pods == 0 {
        return Err(invalid(name, "max_pods", "must be positive"));
    }
    check_price(name, "on_demand", e.on_demand)?;
    let spot = match e.spot {
        Some(p) => {
            check_price(name, "spot", p)?;
            p
        }
        None => round_price(e.on_demand * s.spot_factor),
    };
    let region = e.region.as_deref().unwrap_or(&s.region);
    check_label_value(name, "region", region)?;
    let zones = e.zones.as_ref().unwrap_or(&s.zones);
    if zones.is_empty() {
        return Err(invalid(name, "zones", "at least one zone is needed"));
    }
    for z in zones {
        check_label_value(name, "zones", z)?;
    }

    let memory = i64::try_from(e.memory_mib)
        .ok()
        .and_then(|m| m.checked_mul(1 << 20))
        .ok_or_else(|| invalid(name, "memory_mib", "too large"))?;
    let root = i64::from(s.root_volume_gib) << 30;
    let mut capacity = Resources::new()
        .with("cpu", i64::from(e.vcpu) * 1000)
        .with("memory", memory)
        .with("ephemeral-storage", root)
        .with("pods", i64::from(max_pods));
    let reserved_memory = match s.overhead {
        OverheadStyle::Eks => overhead::eks_memory(max_pods),
        OverheadStyle::Gke => overhead::gke_memory(memory),
    };
    let overhead = Resources::new()
        .with("cpu", overhead::cpu_millis(e.vcpu))
        .with("memory", reserved_memory + overhead::EVICTION_MEMORY)
        .with("ephemeral-storage", overhead::ephemeral_storage(root));

    let (family, size) = family_and_size(name);
    let mut l = Labels::new();
    let mut put = |k: &str, v: String| {
        l.insert(k.to_string(), v);
    };
    put(labels::INSTANCE_TYPE, name.to_string());
    put(labels::INSTANCE_FAMILY, family.to_string());
    if !size.is_empty() {
        put(labels::INSTANCE_SIZE, size.to_string());
    }
    put(labels::ARCH, arch.to_string());
    put(labels::OS, "linux".to_string());
    put(labels::REGION, region.to_string());

    let gpu = match &e.gpu {
        None => {
            if e.gke_accelerator.is_some() {
                return Err(invalid(name, "gke_accelerator", "given without a gpu"));
            }
            None
        }
        Some(g) => {
            let model = gpus.get(&g.model).ok_or_else(|| {
                invalid(
                    name,
                    "gpu.model",
                    format!("unknown GPU model {:?} (not under gpus:)", g.model),
                )
            })?;
            if g.count == 0 {
                return Err(invalid(name, "gpu.count", "must be positive"));
            }
            let resource = model
                .resource
                .as_deref()
                .or_else(|| default_resource(&model.vendor))
                .unwrap_or_default()
                .to_string();
            capacity.set(&resource, i64::from(g.count));
            let spec = GpuSpec {
                vendor: model.vendor.clone(),
                model: g.model.clone(),
                count: g.count,
                memory_mib: model.memory_mib,
                resource,
            };
            // The same labels the cloud providers give the types they describe.
            let accel = e
                .gke_accelerator
                .as_ref()
                .or(model.gke_accelerator.as_ref());
            if provider == GCP {
                match accel {
                    Some(a) => check_label_value(name, "gke_accelerator", a)?,
                    None => {
                        return Err(invalid(
                            name,
                            "gke_accelerator",
                            format!("GCP GPU type needs one; model {} has none", g.model),
                        ));
                    }
                }
            }
            crate::common::add_gpu_labels(
                &mut l,
                &spec,
                crate::common::GpuNames {
                    short: &model.name,
                    product: model.product.as_deref(),
                    gke_accelerator: accel.filter(|_| provider == GCP).map(String::as_str),
                },
            );
            Some(spec)
        }
    };

    let mut offerings = Vec::with_capacity(zones.len() * 2);
    for zone in zones {
        for (capacity_type, price) in [
            (CapacityType::Spot, spot),
            (CapacityType::OnDemand, e.on_demand),
        ] {
            offerings.push(Offering {
                zone: zone.clone(),
                zone_id: None,
                capacity_type,
                price,
                available: true,
            });
        }
    }

    Ok(CatalogType {
        provider: provider.to_string(),
        region: region.to_string(),
        instance_type: InstanceType {
            name: name.to_string(),
            arch: arch.to_string(),
            capacity,
            overhead,
            gpu,
            labels: l,
            offerings,
        },
    })
}

impl Catalog {
    /// Loads a catalog file.
    ///
    /// # Errors
    /// [`CatalogError::Parse`] when the text is not YAML of the catalog's shape (unknown fields
    /// included); [`CatalogError::Invalid`] naming the entry and field of the first bad value
    /// (non-positive sizes or prices, unknown GPU model, invalid label values, duplicate names).
    pub fn parse(yaml: &str) -> Result<Catalog, CatalogError> {
        autoscaler_core::nesting::check_flow_nesting(yaml)
            .map_err(|e| CatalogError::Parse(e.to_string()))?;
        let file: File =
            serde_norway::from_str(yaml).map_err(|e| CatalogError::Parse(e.to_string()))?;
        check_gpu_models(&file.gpus)?;
        let mut seen = BTreeSet::new();
        let mut types = Vec::new();
        for (provider, section) in &file.providers {
            check_label_value(provider, "providers", provider)?;
            check_section(provider, section)?;
            for entry in &section.types {
                if !seen.insert(entry.name.as_str()) {
                    return Err(invalid(&entry.name, "name", "listed twice"));
                }
                types.push(build(provider, section, entry, &file.gpus)?);
            }
        }
        Ok(Catalog { types })
    }

    /// Every entry with its provider and region.
    pub fn entries(&self) -> &[CatalogType] {
        &self.types
    }

    /// Every instance type.
    pub fn instance_types(&self) -> Vec<InstanceType> {
        self.types.iter().map(|t| t.instance_type.clone()).collect()
    }

    /// The instance types of one provider (`aws`, `gcp`); empty for an unknown provider.
    pub fn for_provider(&self, provider: &str) -> Vec<InstanceType> {
        self.types
            .iter()
            .filter(|t| t.provider == provider)
            .map(|t| t.instance_type.clone())
            .collect()
    }

    /// Provider keys present, sorted.
    pub fn providers(&self) -> Vec<&str> {
        let set: BTreeSet<&str> = self.types.iter().map(|t| t.provider.as_str()).collect();
        set.into_iter().collect()
    }

    /// The instance type called `name`.
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.types
            .iter()
            .map(|t| &t.instance_type)
            .find(|t| t.name == name)
    }

    /// Number of instance types.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
}

/// One instance type as `gpu-autoscaler catalog --json` writes it. `zones` and the two
/// minimum prices are derived from `offerings`, so they are read and not trusted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRow {
    name: String,
    arch: String,
    gpu: Option<GpuSpec>,
    capacity: Resources,
    allocatable: Resources,
    #[serde(default, rename = "zones")]
    _zones: Vec<String>,
    #[serde(default, rename = "on_demand_price")]
    _on_demand_price: Option<f64>,
    #[serde(default, rename = "spot_price")]
    _spot_price: Option<f64>,
    #[serde(default)]
    labels: Labels,
    offerings: Vec<Offering>,
}

/// Reads instance types in exactly the format `gpu-autoscaler catalog --json` writes (capacity,
/// allocatable and offerings per type; the overhead is their difference), so a catalog printed
/// from a cloud or edited by hand can be handed back to `run --catalog-file` and `validate`.
///
/// # Errors
/// [`CatalogError::Parse`] when the text is not that JSON (unknown fields included);
/// [`CatalogError::Invalid`] naming the type and field of a bad value: an empty or repeated
/// name, allocatable above capacity, an offering whose price is not a positive number, a type
/// without offerings.
pub fn parse_json_rows(text: &str) -> Result<Vec<InstanceType>, CatalogError> {
    // JSON is YAML: one parser, and its messages carry line and column.
    autoscaler_core::nesting::check_flow_nesting(text)
        .map_err(|e| CatalogError::Parse(e.to_string()))?;
    let rows: Vec<JsonRow> =
        serde_norway::from_str(text).map_err(|e| CatalogError::Parse(e.to_string()))?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if r.name.is_empty() {
            return Err(invalid("", "name", "is empty"));
        }
        if !seen.insert(r.name.clone()) {
            return Err(invalid(&r.name, "name", "listed twice"));
        }
        let overhead = r.capacity.minus(&r.allocatable);
        if !r.allocatable.fits(&r.capacity) {
            return Err(invalid(&r.name, "allocatable", "is larger than capacity"));
        }
        if r.offerings.is_empty() {
            return Err(invalid(&r.name, "offerings", "is empty"));
        }
        for (i, o) in r.offerings.iter().enumerate() {
            if !(o.price.is_finite() && o.price > 0.0) {
                return Err(invalid(
                    &r.name,
                    &format!("offerings[{i}].price"),
                    format!("{} is not a positive price", o.price),
                ));
            }
        }
        out.push(InstanceType {
            name: r.name,
            arch: r.arch,
            capacity: r.capacity,
            overhead,
            gpu: r.gpu,
            labels: r.labels,
            offerings: r.offerings,
        });
    }
    Ok(out)
}

/// The largest user catalog file read: `catalog --json` of every AWS instance type in every
/// zone is a few MiB, and the YAML parser holds a whole document's events in memory (a
/// 300 MB file of brackets took over 2 minutes and 1.2 GB before this bound).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads and parses a user's catalog file ([`parse_user_catalog`]), refusing one larger than
/// [`MAX_FILE_BYTES`] (reading at most one byte past it).
///
/// # Errors
/// [`CatalogError::Read`] naming the file when it cannot be read or is too large; else as
/// [`parse_user_catalog`].
pub fn read_user_catalog(path: &std::path::Path) -> Result<Vec<InstanceType>, CatalogError> {
    parse_user_catalog(&read_bounded(path)?)
}

/// A catalog file's text, refused above [`MAX_FILE_BYTES`].
///
/// # Errors
/// [`CatalogError::Read`] naming the file.
pub fn read_bounded(path: &std::path::Path) -> Result<String, CatalogError> {
    std::fs::File::open(path)
        .and_then(|f| crate::bounded::read_bounded(f, MAX_FILE_BYTES, "a catalog may be"))
        .map_err(|e| CatalogError::Read(format!("reading {}: {e}", path.display())))
}

/// Reads a user's catalog file: `catalog --json` output (a JSON array) or a catalog YAML file
/// of the embedded catalog's shape (every provider's types).
///
/// # Errors
/// As [`parse_json_rows`] and [`Catalog::parse`].
pub fn parse_user_catalog(text: &str) -> Result<Vec<InstanceType>, CatalogError> {
    if text.trim_start().starts_with('[') {
        parse_json_rows(text)
    } else {
        Catalog::parse(text).map(|c| c.instance_types())
    }
}

/// The embedded default catalog, loaded once.
///
/// # Panics
/// Never in a released build: the embedded file is part of the source and a unit test proves
/// it loads, so a failure here is a bug in this crate, reported with the loader's message.
pub fn default() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| match Catalog::parse(DEFAULT_CATALOG_YAML) {
        Ok(c) => c,
        Err(e) => panic!("embedded default catalog is broken (a bug): {e}"),
    })
}

/// Every instance type of the embedded default catalog.
pub fn default_catalog() -> Vec<InstanceType> {
    default().instance_types()
}

/// The embedded default catalog's instance types of one provider (`aws`, `gcp`).
pub fn default_catalog_for(provider: &str) -> Vec<InstanceType> {
    default().for_provider(provider)
}

#[cfg(test)]
mod tests;
