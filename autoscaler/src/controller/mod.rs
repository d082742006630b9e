//! The controller runtime: `gpu-autoscaler run`.
//!
//! The I/O shell around the pure core. Reflectors keep the cluster in memory; a single
//! reconcile loop, run only by the elected leader, turns it into actions:
//!
//! - [`translate`] / [`snapshot`]: Kubernetes objects into the core's [`autoscaler_core::Snapshot`];
//! - [`pod_problems`]: telling pending pods, once per problem, why they get no node;
//! - [`batcher`]: when to plan (1 s idle / 10 s max windows over unschedulable pods);
//! - [`lifecycle`]: the NodeClaim state machine (Pending → Launched → Registered → Initialized),
//!   with the delivered-capacity check (`ResourceMismatch`);
//! - [`guard`]: the launch guard (no more launches for a pod that launched without binding);
//! - [`disrupt`]: the disruption queue state machine (Decided → Tainted → Draining → Deleting);
//! - [`consolidatable`]: disruption verdicts as the `Consolidatable` NodeClaim condition,
//!   rate-limited `DisruptionBlocked` events and the `unremovable_nodes` reason label;
//! - [`cluster_status`]: the `gpu-autoscaler-status` ConfigMap summary;
//! - [`api_calls`]: the single list of API calls the controller makes (RBAC is checked against it);
//! - [`run`]: the wiring: client, reflectors, leader election, the loop, metrics and health.
//!
//! Every decision is a pure function of objects and `now`; the loop only performs actions.

pub mod actuator;
pub mod api_calls;
pub mod batcher;
pub mod cache;
pub mod cluster_status;
pub mod consolidatable;
pub mod disrupt;
pub mod error;
pub mod gangs;
pub mod guard;
pub mod keys;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod pod_problems;
pub mod provreq;
pub mod run;
pub mod settings;
pub mod snapshot;
pub mod translate;

pub use error::{Error, Result};
