//! GPU sharing: how time-slicing and MIG change what a node of an instance type offers.
//!
//! The planner reasons about the node a pool will actually get, not the bare machine: a pool
//! that time-slices 4 ways offers four `nvidia.com/gpu` per physical GPU, a pool with
//! `all-1g.10gb` under the mixed strategy offers `nvidia.com/mig-1g.10gb` and no whole GPUs.
//! [`apply_sharing`] derives that view, resources and the labels GPU Feature Discovery and the
//! GPU Operator will put on the node, so selectors on those labels match before the node exists.

pub mod mig;

use std::borrow::Cow;

use crate::error::CoreError;
use crate::instance::{GpuSpec, InstanceType};
use crate::labels;
use crate::model::{GpuSharing, MigSharing, MigStrategy, TimeSlicing};

/// GPU Feature Discovery's sharing-strategy label (`time-slicing`, `mps`, `none`).
pub const NVIDIA_SHARING_STRATEGY: &str = "nvidia.com/gpu.sharing-strategy";
/// GPU Feature Discovery's label on GPUs that can be partitioned with MIG.
pub const NVIDIA_MIG_CAPABLE: &str = "nvidia.com/mig.capable";
/// Prefix of the mixed-strategy MIG resources (`nvidia.com/mig-1g.10gb`).
pub const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";
/// GPU Feature Discovery's label on nodes whose GPUs are shared with MPS; NVIDIA's MPS
/// control daemon runs where it is `true`.
pub const NVIDIA_MPS_CAPABLE: &str = "nvidia.com/mps.capable";
/// Suffix the device plugin appends to time-sliced resources when renaming them.
pub const SHARED_SUFFIX: &str = ".shared";

/// The instance type as nodes of a pool with `sharing` will see it: GPU resources multiplied
/// (time-slicing) or split into MIG instances, and the GPU Operator's labels added.
///
/// MIG is applied first, then time-slicing, because the device plugin time-slices whatever
/// devices it advertises, MIG instances included; the pool's replica count is assumed to apply
/// to every GPU resource the node offers. Instance types without GPUs, and an empty `sharing`,
/// come back unchanged so that one pool can mix GPU and CPU types.
///
/// # Errors
/// [`CoreError::UnknownMigConfig`] when the MIG configuration does not exist for the type's GPU;
/// [`CoreError::InvalidGpuSharing`] for MIG on a GPU without MIG, a multi-profile layout under the
/// single strategy, time-slicing of a non-NVIDIA device or zero replicas.
pub fn apply_sharing(it: &InstanceType, sharing: &GpuSharing) -> Result<InstanceType, CoreError> {
    apply_sharing_cow(it, sharing).map(Cow::into_owned)
}

/// [`apply_sharing`], borrowing the instance type when it comes back unchanged (no GPU, or
/// no sharing configured): the planner asks this of every type of every pool each plan.
///
/// # Errors
/// As [`apply_sharing`].
pub fn apply_sharing_cow<'a>(
    it: &'a InstanceType,
    sharing: &GpuSharing,
) -> Result<Cow<'a, InstanceType>, CoreError> {
    let Some(gpu) = it.gpu.as_ref().filter(|g| g.count > 0) else {
        return Ok(Cow::Borrowed(it));
    };
    if sharing.mig.is_none() && sharing.time_slicing.is_none() {
        return Ok(Cow::Borrowed(it));
    }
    // NVIDIA's device plugin shares only whole GPUs with MPS, not MIG instances.
    if let (Some(m), Some(ts)) = (&sharing.mig, &sharing.time_slicing)
        && ts.mps
        && m.config != mig::DISABLED
    {
        return Err(invalid(
            gpu,
            "MPS shares only whole GPUs, not MIG instances (MIG configuration \
             all-disabled, or time-slicing instead of MPS)",
        ));
    }
    let mut out = it.clone();
    if let Some(m) = &sharing.mig {
        apply_mig(&mut out, gpu, m)?;
    }
    if let Some(ts) = &sharing.time_slicing {
        apply_time_slicing(&mut out, gpu, ts)?;
    }
    Ok(Cow::Owned(out))
}

fn invalid(gpu: &GpuSpec, why: impl Into<String>) -> CoreError {
    CoreError::InvalidGpuSharing {
        model: gpu.model.clone(),
        why: why.into(),
    }
}

fn is_nvidia(gpu: &GpuSpec) -> bool {
    gpu.vendor.eq_ignore_ascii_case("nvidia")
}

fn set_label(it: &mut InstanceType, key: &str, value: impl Into<String>) {
    it.labels.insert(key.to_string(), value.into());
}

/// Appends `suffix` to the GFD product label, when the type carries one.
fn suffix_product(it: &mut InstanceType, suffix: &str) {
    if let Some(product) = it.labels.get_mut(labels::NVIDIA_PRODUCT) {
        product.push_str(suffix);
    }
}

fn apply_mig(it: &mut InstanceType, gpu: &GpuSpec, m: &MigSharing) -> Result<(), CoreError> {
    let strategy = match m.strategy {
        MigStrategy::Single => "single",
        MigStrategy::Mixed => "mixed",
    };
    let model = mig::model_for(&gpu.model, gpu.memory_mib);
    // `all-disabled` is a no-op on any GPU, so a pool may list non-MIG types next to MIG ones;
    // the operator's labels only concern NVIDIA nodes, and it writes `mig.config` only on
    // nodes whose GPUs can do MIG (GFD's `mig.strategy` is on every node it runs on).
    if m.config == mig::DISABLED {
        if !is_nvidia(gpu) {
            return Ok(());
        }
        set_label(it, labels::NVIDIA_MIG_STRATEGY, strategy);
        if model.is_some() {
            set_label(it, labels::NVIDIA_MIG_CONFIG, mig::DISABLED);
            set_label(it, NVIDIA_MIG_CAPABLE, "true");
        } else {
            set_label(it, NVIDIA_MIG_CAPABLE, "false");
        }
        return Ok(());
    }
    let model = match model {
        Some(model) if is_nvidia(gpu) => model,
        _ => return Err(mig::not_mig_capable(&gpu.model)),
    };
    let layout =
        mig::layout_profiles(model, &m.config).ok_or_else(|| CoreError::UnknownMigConfig {
            config: m.config.clone(),
            // Say which geometry was used when the catalog name alone does not (`A100`).
            model: if gpu.model == model.name {
                gpu.model.clone()
            } else {
                format!("{} ({})", gpu.model, model.name)
            },
        })?;
    let gpus = i64::from(gpu.count);
    it.capacity.set(&gpu.resource, 0);
    match m.strategy {
        MigStrategy::Single => {
            let [(profile, per_gpu)] = layout.as_slice() else {
                // `all-enabled` creates no instances, and the device plugin under the single
                // strategy refuses to start on a MIG-enabled GPU without any: no node of the
                // pool would ever offer a GPU, nor run its device plugin.
                if layout.is_empty() {
                    return Err(invalid(
                        gpu,
                        format!(
                            "MIG strategy single needs MIG instances to advertise as {}, but \
                             {} creates none and the device plugin does not start without \
                             them; use strategy mixed or an all-<profile> configuration",
                            gpu.resource, m.config
                        ),
                    ));
                }
                let names: Vec<&str> = layout.iter().map(|(p, _)| p.name).collect();
                return Err(invalid(
                    gpu,
                    format!(
                        "MIG strategy single advertises every instance as {} and so needs one \
                         profile type, but {} has {}; use strategy mixed or an all-<profile> \
                         configuration",
                        gpu.resource,
                        m.config,
                        names.join(", ")
                    ),
                ));
            };
            let total = i64::from(*per_gpu) * gpus;
            it.capacity.set(&gpu.resource, total);
            // GFD describes the MIG device, not the physical GPU, under the single strategy.
            suffix_product(it, &format!("-MIG-{}", profile.label_name()));
            set_label(it, labels::NVIDIA_COUNT, total.to_string());
            set_label(it, labels::NVIDIA_MEMORY, profile.memory_mib.to_string());
        }
        MigStrategy::Mixed => {
            for (profile, per_gpu) in &layout {
                let total = i64::from(*per_gpu) * gpus;
                let resource = profile.resource_name();
                let cur = it.capacity.get(&resource);
                it.capacity.set(&resource, cur + total);
                let label = format!("{MIG_RESOURCE_PREFIX}{}", profile.label_name());
                set_label(it, &format!("{label}.count"), total.to_string());
                set_label(
                    it,
                    &format!("{label}.memory"),
                    profile.memory_mib.to_string(),
                );
            }
        }
    }
    set_mig_labels(it, &m.config, strategy);
    Ok(())
}

fn set_mig_labels(it: &mut InstanceType, config: &str, strategy: &str) {
    set_label(it, labels::NVIDIA_MIG_CONFIG, config);
    set_label(it, labels::NVIDIA_MIG_STRATEGY, strategy);
    set_label(it, NVIDIA_MIG_CAPABLE, "true");
}

fn apply_time_slicing(
    it: &mut InstanceType,
    gpu: &GpuSpec,
    ts: &TimeSlicing,
) -> Result<(), CoreError> {
    let what = if ts.mps { "MPS" } else { "time-slicing" };
    if !is_nvidia(gpu) {
        return Err(invalid(
            gpu,
            format!("{what} is a feature of NVIDIA's device plugin and needs an NVIDIA GPU"),
        ));
    }
    if ts.replicas == 0 {
        return Err(invalid(gpu, format!("{what} replicas must be at least 1")));
    }

    let devices: Vec<(String, i64)> = it
        .capacity
        .iter()
        .filter(|(name, _)| *name == gpu.resource || name.starts_with(MIG_RESOURCE_PREFIX))
        .map(|(name, amount)| (name.to_string(), amount))
        .collect();
    let replicas = i64::from(ts.replicas);
    for (name, amount) in devices {
        let shared = amount.saturating_mul(replicas);
        if ts.rename {
            it.capacity.set(&name, 0);
            it.capacity.set(&format!("{name}{SHARED_SUFFIX}"), shared);
        } else {
            it.capacity.set(&name, shared);
        }
    }
    set_label(it, labels::NVIDIA_REPLICAS, ts.replicas.to_string());
    set_label(
        it,
        NVIDIA_SHARING_STRATEGY,
        if ts.mps { "mps" } else { "time-slicing" },
    );
    if ts.mps {
        // The MPS control daemon's DaemonSet selects it: its overhead counts on the node.
        set_label(it, NVIDIA_MPS_CAPABLE, "true");
    }
    // GFD marks the product shared only when the resource keeps its name: a renamed
    // resource (`nvidia.com/gpu.shared`) says so itself, and the product label stays as it is.
    if !ts.rename {
        suffix_product(it, "-SHARED");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
