//! The controller runtime: `gpu-autoscaler run`.
//!
//! The I/O shell around the pure core. Reflectors keep the cluster in memory; a single
//! reconcile loop, run only by the elected leader, turns it into actions:
//!
//! - [`translate`] / [`snapshot`]: Kubernetes objects into the core's [`autoscaler_core::Snapshot`];
//! - [`overlays`]: NodeOverlays applied to the catalogs (controller and `explain` alike);
//! - [`volumes`]: where a pod's PersistentVolumeClaims let it run (volume topology);
//! - [`pod_problems`]: telling pending pods, once per problem, why they get no node;
//! - [`batcher`]: when to plan (1 s idle / 10 s max windows over unschedulable pods);
//! - [`lifecycle`]: the NodeClaim state machine (Pending → Launched → Registered → Initialized),
//!   with the delivered-capacity check (`ResourceMismatch`);
//! - [`guard`]: the launch guard (no more launches for a pod that launched without binding);
//! - [`autoscaler_core::disruption::execute`]: the disruption queue state machine (Decided →
//!   Tainted → Draining → Deleting), in the core because the simulator drives it too;
//! - [`consolidatable`]: disruption verdicts as the `Consolidatable` NodeClaim condition,
//!   rate-limited `DisruptionBlocked` events and the `unremovable_nodes` reason label;
//! - [`cluster_status`]: the `gpu-autoscaler-status` ConfigMap summary;
//! - [`api_calls`]: the single list of API calls the controller makes (RBAC is checked against it);
//! - [`run`]: the wiring: client, reflectors, leader election, the loop, metrics and health;
//!   one module per stage of the loop (`run/claims.rs`, `provisioning.rs`, `provreqs.rs`,
//!   `disruption.rs`, `gc.rs`, `status.rs`; `launch.rs` and `stores.rs` serve them).
//!
//! Every decision is a pure function of objects and `now`; the loop only performs actions.
//!
//! # The state machines in detail
//!
//! Pure state machines, each with a `step` returning one action: `batcher` (1 s idle / 10 s max
//! windows, `flag` to replan, and the pods still pending planned again every `--replan-interval`,
//! 10 s, so edits no pod event announces reach them), `lifecycle` (NodeClaim Pending → Launched →
//! Registered → Initialized, or Failed/timeouts → deleted; Deleting → Node deleted, instance
//! terminated, finalizer released; the phase is read off the object so restarts resume. *Delivered
//! capacity*: at launch the claim records in `status.capacity`/`allocatable` the instance type as
//! the pool's node, GPU sharing applied; a Ready Node advertising less of a GPU-class resource, or
//! of another extended resource the claim's pods requested, is waited for until
//! `--device-plugin-timeout` after registration, then `lifecycle::step` returns `ResourceMismatch`:
//! the claim is `Initialized=False` reason `ResourceMismatch` with the numbers, Warning events go
//! to the claim and its NodePool (`run/guard.rs`), and the shape (pool x instance type) enters
//! `providers::UnavailableShapes` (the same `Expiring` cache as refused offerings) for
//! `--resource-mismatch-ttl`, renewed every round while such a claim exists; `instance_types` marks
//! its offerings unavailable for that pool, so the planner neither opens claims of it nor counts
//! the mismatched in-flight claim. The NodePool's `CapacityDelivered` condition is false while one
//! of its shapes is excluded. The claim stays so until its Node catches up or the initialization
//! timeout deletes it), `guard` (the launch guard: a pod's launches are counted once its claim
//! launched; a pending pod that caused `--max-launches-per-pod` launches (1) without binding causes
//! none until `--launch-backoff` (5m, doubling per further launch up to 1h) after the last;
//! `provision` drops new claims whose every pod is held back, with every claim of an all-or-nothing
//! group one of them serves, and tells each pod once per back-off with a `LaunchBackoff` event; in
//! memory, so a restart counts afresh), the core's `disruption::execute` (Decided → validated with the core's `validate` →
//! \[Replacing\] → Tainted (validated again once a replacement is up; abandoned if a pod the last
//! validation did not see is on the nodes) → Draining with 429 backoff → Deleting → Done, or
//! Abandoned → untainted; a drain past `--drain-timeout`, a replacement that never initializes or
//! an action failing 5 times in a row after the taint is a failed deletion: it sets
//! `DisruptionState.last_failure`, pausing scale-down and drift in the pool for
//! `--scale-down-delay-after-failure`, doubled per such failure in a row up to an hour),
//! `leader::decide` (Lease create/renew/take over; as in client-go, another holder's lease expires
//! `leaseDurationSeconds` after this replica last saw its record (holder, acquire/renew time,
//! transitions, duration) change, timed on the local monotonic clock in `leader::Observation`:
//! `renewTime` is never compared with the local clock, so skew between replicas cannot hand over a
//! live lease; a replica that starts while a stale lease is in place waits one duration from its
//! first reading).

#[cfg(feature = "controller")]
pub mod actuator;
pub mod api_calls;
pub mod atomic;
pub mod batcher;
pub mod cache;
pub mod cluster_status;
pub mod consolidatable;
pub mod crashpoint;
pub mod detach;
pub mod dra;
pub mod error;
pub mod gangs;
pub mod guard;
pub mod keys;
#[cfg(feature = "controller")]
pub mod leader;
pub mod lifecycle;
#[cfg(feature = "controller")]
pub mod metrics;
pub mod overlays;
pub mod pod_problems;
pub mod provreq;
#[cfg(feature = "controller")]
pub mod run;
pub mod settings;
pub mod snapshot;
pub mod translate;
pub mod volumes;
pub mod warm_backoff;

pub use error::{Error, Result};
