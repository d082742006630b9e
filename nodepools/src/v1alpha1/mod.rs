//! API version `v1alpha1` of the `gpu-autoscaler.dev` group: `NodePool`, `NodeClaim`,
//! `CapacityQuota` and `NodeOverlay`.

mod capacityquota;
mod common;
mod convert;
mod drift_hash;
mod nodeclaim;
mod nodeoverlay;
mod nodepool;
mod schema;

pub use capacityquota::{
    CapacityQuota, CapacityQuotaLimits, CapacityQuotaSpec, LabelSelector, LabelSelectorRequirement,
};
pub use common::{NodeClassRef, NodeSelectorRequirement, Taint, conditions};
pub use convert::{ClaimSpec, NODES_LIMIT};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, ResourceRequirements};
pub use nodeoverlay::{MAX_OVERLAY_REQUIREMENTS, NodeOverlay, NodeOverlaySpec};
pub use nodepool::{
    AtomicScaleUpSpec, BUDGET_DURATION_PATTERN, BUDGET_NODES_PATTERN, BUDGET_SCHEDULE_PATTERN,
    BudgetSpec, DeviceAttributeSpec, DisruptionSpec, DraSpec, GpuSharingSpec, MigSpec, MpsSpec,
    NodePool, NodePoolSpec, NodePoolStatus, NodePoolTemplate, TemplateMetadata, TimeSlicingSpec,
};

/// The version string.
pub const VERSION: &str = "v1alpha1";
