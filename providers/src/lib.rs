//! `providers`: how gpu-autoscaler talks to clouds.
//!
//! - [`CloudProvider`]: the async trait every cloud implements (instance types, launch, delete,
//!   get, list), with its idempotency and retry contract written on each method.
//! - [`ProviderError`]: the one error type, naming the action that failed.
//! - [`UnavailableOfferings`]: the insufficient-capacity cache, and [`UnavailableShapes`]: NodePool
//!   instance types whose nodes came up short, both [`Expiring`] with time passed in.
//! - [`bounded`]: reading a user's file with a size bound.
//! - [`catalog`]: the embedded default catalog of AWS and GCP instance types, the project's own
//!   file of public facts, turned into core [`autoscaler_core::InstanceType`]s.
//! - [`common`]: what real providers share: retry/backoff and token-bucket settings, label-safe
//!   names, and the node labels of an instance type and its GPUs.
//! - [`faults`]: cloud faults at a seeded rate (capacity, throttling, 5xx, timeouts) for the
//!   emulated and fake clouds.
//! - [`fake`]: a deterministic in-memory provider for tests and the simulator.
//! - `kwok` (cargo feature `kwok`): machines as Kubernetes Node objects, for end-to-end tests
//!   and large-scale trials without cloud cost.

pub mod bounded;
pub mod catalog;
pub mod common;
mod error;
pub mod fake;
pub mod faults;
#[cfg(feature = "kwok")]
pub mod kwok;
mod provider;
mod unavailable;

pub use error::{Action, ProviderError};
pub use provider::{
    CloudProvider, Instance, InstanceState, LaunchRequest, Launched, NodeClassRef, OfferingKey,
    PLACEMENT_GROUP_NAME_MAX, placement_group_name, tags,
};
pub use unavailable::{Expiring, ShapeKey, UnavailableOfferings, UnavailableShapes};
