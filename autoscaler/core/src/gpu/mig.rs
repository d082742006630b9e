//! The project's own MIG table: which profiles each MIG-capable GPU model offers, how many of
//! each fit on one GPU, and the named layouts (`all-<profile>`, `all-balanced`, `all-disabled`,
//! `all-enabled`) the GPU Operator's mig-manager understands.
//!
//! The facts (profile sizes, per-GPU maxima, the operator's default `all-balanced` geometry) are
//! public NVIDIA facts written down here as Rust data so that the core never reads a file. A test
//! cross-checks this table against `../shared/data/mig_profiles.json` when that file is present.

use crate::error::CoreError;

/// One MIG GPU-instance profile of one GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigProfile {
    /// Profile name as NVIDIA spells it (`1g.10gb`, `1g.10gb+me`).
    pub name: &'static str,
    /// Compute slices (of 7) the instance takes.
    pub compute_slices: u32,
    /// Memory slices (of 8) the instance takes.
    pub memory_slices: u32,
    /// Memory in GB as the name states it.
    pub memory_gb: u32,
    /// Memory in MiB as the driver reports it.
    pub memory_mib: u64,
    /// How many instances of this profile fit on one GPU when it is used alone.
    pub max_instances: u32,
    /// Whether this is a media-extension (`+me`) variant, which holds the GPU's media engines.
    pub media_extensions: bool,
}

impl MigProfile {
    /// The profile as it appears in resource names, labels and configuration names: `+` is not
    /// allowed in label values, so the device plugin writes `1g.10gb+me` as `1g.10gb.me`.
    pub fn label_name(&self) -> String {
        self.name.replace('+', ".")
    }

    /// The mixed-strategy extended resource, `nvidia.com/mig-<profile>`.
    pub fn resource_name(&self) -> String {
        format!("nvidia.com/mig-{}", self.label_name())
    }
}

/// A MIG-capable GPU model and its geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigModel {
    /// Canonical name (`A100-40GB`, `H100-80GB`, `H200-141GB`, `B200`).
    pub name: &'static str,
    /// Every profile the model offers.
    pub profiles: &'static [MigProfile],
    /// The GPU Operator's default `all-balanced` layout for the model: (profile, per GPU).
    pub balanced: &'static [(&'static str, u32)],
}

/// Shorthand for a table row.
const fn p(
    name: &'static str,
    compute_slices: u32,
    memory_slices: u32,
    memory_gb: u32,
    memory_mib: u64,
    max_instances: u32,
) -> MigProfile {
    MigProfile {
        name,
        compute_slices,
        memory_slices,
        memory_gb,
        memory_mib,
        max_instances,
        media_extensions: false,
    }
}

/// A media-extension (`+me`) row: one slice with the GPU's media engines, so one per GPU.
const fn me(name: &'static str, memory_gb: u32, memory_mib: u64) -> MigProfile {
    MigProfile {
        media_extensions: true,
        ..p(name, 1, 1, memory_gb, memory_mib, 1)
    }
}

const A100_40GB: &[MigProfile] = &[
    p("1g.5gb", 1, 1, 5, 4864, 7),
    me("1g.5gb+me", 5, 4864),
    p("1g.10gb", 1, 2, 10, 9856, 4),
    p("2g.10gb", 2, 2, 10, 9856, 3),
    p("3g.20gb", 3, 4, 20, 19968, 2),
    p("4g.20gb", 4, 4, 20, 19968, 1),
    p("7g.40gb", 7, 8, 40, 40192, 1),
];

const A100_80GB: &[MigProfile] = &[
    p("1g.10gb", 1, 1, 10, 9856, 7),
    me("1g.10gb+me", 10, 9856),
    p("1g.20gb", 1, 2, 20, 19968, 4),
    p("2g.20gb", 2, 2, 20, 19968, 3),
    p("3g.40gb", 3, 4, 40, 40192, 2),
    p("4g.40gb", 4, 4, 40, 40192, 1),
    p("7g.80gb", 7, 8, 80, 80384, 1),
];

const H100_80GB: &[MigProfile] = &[
    p("1g.10gb", 1, 1, 10, 10240, 7),
    me("1g.10gb+me", 10, 10240),
    p("1g.20gb", 1, 2, 20, 20480, 4),
    p("2g.20gb", 2, 2, 20, 20480, 3),
    p("3g.40gb", 3, 4, 40, 40960, 2),
    p("4g.40gb", 4, 4, 40, 40960, 1),
    p("7g.80gb", 7, 8, 80, 81920, 1),
];

// H100 NVL (94 GB). Names and counts follow NVIDIA's MIG user guide; it is absent from the
// cross-check file, so memory_mib is the nominal GB x 1024 rather than a driver-reported value.
const H100_94GB: &[MigProfile] = &[
    p("1g.12gb", 1, 1, 12, 12288, 7),
    me("1g.12gb+me", 12, 12288),
    p("1g.24gb", 1, 2, 24, 24576, 4),
    p("2g.24gb", 2, 2, 24, 24576, 3),
    p("3g.47gb", 3, 4, 47, 48128, 2),
    p("4g.47gb", 4, 4, 47, 48128, 1),
    p("7g.94gb", 7, 8, 94, 96256, 1),
];

const H200_141GB: &[MigProfile] = &[
    p("1g.18gb", 1, 1, 18, 18432, 7),
    me("1g.18gb+me", 18, 18432),
    p("1g.35gb", 1, 2, 35, 35840, 4),
    p("2g.35gb", 2, 2, 35, 35840, 3),
    p("3g.71gb", 3, 4, 71, 72704, 2),
    p("4g.71gb", 4, 4, 71, 72704, 1),
    p("7g.141gb", 7, 8, 141, 144384, 1),
];

const B200: &[MigProfile] = &[
    p("1g.23gb", 1, 1, 23, 23552, 7),
    me("1g.23gb+me", 23, 23552),
    p("1g.45gb", 1, 2, 45, 46080, 4),
    p("2g.45gb", 2, 2, 45, 46080, 3),
    p("3g.90gb", 3, 4, 90, 92160, 2),
    p("4g.90gb", 4, 4, 90, 92160, 1),
    p("7g.180gb", 7, 8, 180, 184320, 1),
];

/// Every MIG-capable model the project knows.
pub static MODELS: &[MigModel] = &[
    MigModel {
        name: "A100-40GB",
        profiles: A100_40GB,
        balanced: &[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)],
    },
    MigModel {
        name: "A100-80GB",
        profiles: A100_80GB,
        balanced: &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)],
    },
    MigModel {
        name: "H100-80GB",
        profiles: H100_80GB,
        balanced: &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)],
    },
    MigModel {
        name: "H100-94GB",
        profiles: H100_94GB,
        balanced: &[("1g.12gb", 2), ("2g.24gb", 1), ("3g.47gb", 1)],
    },
    MigModel {
        name: "H200-141GB",
        profiles: H200_141GB,
        balanced: &[("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)],
    },
    MigModel {
        name: "B200",
        profiles: B200,
        balanced: &[("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)],
    },
];

/// Layout name that turns MIG off: whole GPUs.
pub const DISABLED: &str = "all-disabled";
/// Layout name that turns MIG mode on without creating instances (the GPU offers nothing until
/// someone partitions it by hand).
pub const ENABLED: &str = "all-enabled";
/// Layout name of the operator's mixed default geometry.
pub const BALANCED: &str = "all-balanced";

/// Normalises a model string: upper case, `NVIDIA`/`Tesla` prefixes dropped, separators unified,
/// so `nvidia-h100-80gb`, `NVIDIA H100 80GB HBM3` and `H100` compare alike.
fn normalise(model: &str) -> String {
    let up = model.trim().to_ascii_uppercase().replace([' ', '_'], "-");
    let mut s = up.as_str();
    for prefix in ["NVIDIA-", "TESLA-"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
        }
    }
    s.to_string()
}

fn by_name(name: &str) -> Option<&'static MigModel> {
    MODELS.iter().find(|m| m.name == name)
}

/// The MIG model of a catalog GPU: `model` as the catalog spells it (`A100`, `A100-80GB`, `H100`,
/// `H200`, `B200`, or a GFD product string), with `memory_mib` (per GPU, 0 when unknown)
/// telling A100 40GB from 80GB and H100 80GB from 94GB when the name does not.
pub fn model_for(model: &str, memory_mib: u64) -> Option<&'static MigModel> {
    let m = normalise(model);
    let says = |gb: &str| m.contains(gb);
    if m.starts_with("A100") {
        if says("80GB") || (!says("40GB") && memory_mib > 60 * 1024) {
            by_name("A100-80GB")
        } else {
            by_name("A100-40GB")
        }
    } else if m.starts_with("H100") {
        // H100 96GB (GH200) has its own geometry that the table does not hold.
        if says("96GB") || memory_mib > 95 * 1024 + 512 {
            None
        } else if says("94GB") || says("NVL") || memory_mib > 85 * 1024 {
            by_name("H100-94GB")
        } else {
            by_name("H100-80GB")
        }
    } else if m.starts_with("H200") {
        by_name("H200-141GB")
    } else if m.starts_with("B200") {
        by_name("B200")
    } else {
        None
    }
}

/// The profiles of a GPU model (`A100-80GB`, `H100`, `H200`...); a bare `A100` means the 40 GB
/// part and a bare `H100` the 80 GB part. `None` when the model has no MIG.
pub fn profiles(model: &str) -> Option<&'static [MigProfile]> {
    model_for(model, 0).map(|m| m.profiles)
}

/// Every layout name valid for `m`, in a stable order: `all-disabled`, `all-enabled`,
/// `all-balanced`, then `all-<profile>` in table order.
pub fn configs(m: &MigModel) -> Vec<String> {
    let mut out = vec![
        DISABLED.to_string(),
        ENABLED.to_string(),
        BALANCED.to_string(),
    ];
    out.extend(m.profiles.iter().map(|p| format!("all-{}", p.label_name())));
    out
}

/// Whether `name` is a valid layout for at least one known model (used by NodePool validation,
/// which does not know the instance types yet).
pub fn is_known_config(name: &str) -> bool {
    MODELS.iter().any(|m| layout_profiles(m, name).is_some())
}

/// The layout as table rows; `None` when `m` has no layout called `config`.
pub(crate) fn layout_profiles(
    m: &'static MigModel,
    config: &str,
) -> Option<Vec<(&'static MigProfile, u32)>> {
    match config {
        DISABLED | ENABLED => Some(Vec::new()),
        // A balanced entry naming no profile would be a table typo; the tests rule it out.
        BALANCED => Some(
            m.balanced
                .iter()
                .filter_map(|(name, n)| profile(m, name).map(|p| (p, *n)))
                .collect(),
        ),
        _ => {
            let wanted = config.strip_prefix("all-")?;
            m.profiles
                .iter()
                .find(|p| p.label_name() == wanted)
                .map(|p| vec![(p, p.max_instances)])
        }
    }
}

fn layout_of(m: &'static MigModel, config: &str) -> Option<Vec<(String, u32)>> {
    layout_profiles(m, config).map(|rows| {
        rows.into_iter()
            .map(|(p, n)| (p.name.to_string(), n))
            .collect()
    })
}

/// The per-GPU layout of `config` on `m`: (profile name, instances per GPU); empty for
/// `all-disabled` and `all-enabled`.
///
/// # Errors
/// [`CoreError::UnknownMigConfig`] when `m` has no such layout.
pub fn layout_for(m: &'static MigModel, config: &str) -> Result<Vec<(String, u32)>, CoreError> {
    layout_of(m, config).ok_or_else(|| CoreError::UnknownMigConfig {
        config: config.to_string(),
        model: m.name.to_string(),
    })
}

/// The per-GPU layout of `config` on the GPU model `model` (resolved as [`profiles`] does).
///
/// # Errors
/// [`CoreError::InvalidGpuSharing`] when the model has no MIG, [`CoreError::UnknownMigConfig`]
/// when the model has no such layout.
pub fn layout(model: &str, config: &str) -> Result<Vec<(String, u32)>, CoreError> {
    let m = model_for(model, 0).ok_or_else(|| not_mig_capable(model))?;
    layout_for(m, config)
}

/// The error for MIG asked of a GPU without MIG.
pub(crate) fn not_mig_capable(model: &str) -> CoreError {
    let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
    CoreError::InvalidGpuSharing {
        model: model.to_string(),
        why: format!(
            "this GPU does not support MIG (MIG-capable models: {})",
            known.join(", ")
        ),
    }
}

/// The profile named `name` (NVIDIA spelling or label spelling) of `m`.
pub fn profile(m: &'static MigModel, name: &str) -> Option<&'static MigProfile> {
    m.profiles
        .iter()
        .find(|p| p.name == name || p.label_name() == name)
}

#[cfg(test)]
mod tests;
