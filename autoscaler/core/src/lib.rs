//! `autoscaler-core`: the pure planning core of gpu-autoscaler.
//!
//! Snapshot in, plan out. Nothing here does I/O, reads a clock (time is a parameter), spawns a
//! task or draws an unseeded random number, and planning never fails: a pod that cannot be
//! helped is returned as data with a reason. The only `Result`s parse user-written values (quantities, durations, selectors).

pub mod builders;
pub mod cadence;
pub mod cron;
pub mod disruption;
pub mod dra;
pub mod duration;
pub mod error;
pub mod exact;
pub mod explain;
pub mod gang;
pub mod gpu;
pub mod health;
pub mod instance;
pub mod keys;
pub mod labels;
pub mod lp;
pub mod model;
pub mod nesting;
pub mod offerings;
pub mod overlay;
pub mod plan;
pub mod provision;
pub mod provreq;
pub mod quantity;
pub mod quota;
pub mod requirements;
pub mod resources;
pub mod taints;
pub mod vocabulary;
pub mod zone_ids;

pub use disruption::{DisruptionConfig, DisruptionPlan, DisruptionState, plan_disruption};
pub use error::{CoreError, DurationError, NestingError, QuantityError};
pub use instance::{CapacityType, GpuSpec, InstanceType, Offering};
pub use model::{DaemonSet, InFlightClaim, Node, Pod, PodKey, Pool, Snapshot};
pub use plan::Plan;
pub use provision::plan_provisioning;
pub use quantity::Quantity;
pub use requirements::{Labels, NodeSelector, Operator, Requirements};
pub use resources::Resources;
pub use taints::{Effect, Taint, Toleration};
