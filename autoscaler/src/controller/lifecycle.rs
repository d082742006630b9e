//! The NodeClaim lifecycle as an explicit state machine.
//!
//! ```text
//! Pending ──launch──▶ Launched ──Node with providerID──▶ Registered ──Ready, no startup
//!    │                   │                                  │          taints, GPUs──▶ Initialized
//!    └─launch failed─▶ Failed        registration timeout   │ initialization timeout
//!                        │                 │                │
//!                        └────────────────▶ Deleting ◀──────┘  (claim deleted: terminate the
//!                                                              instance, delete the Node,
//!                                                              release the finalizer)
//! ```
//!
//! [`phase`] reads the state off the object (its conditions and deletionTimestamp), so the
//! controller keeps no state of its own across restarts; [`step`] decides the one action to
//! take next from the claim, its Node and `now`. Both are pure; the runtime performs the action.

use autoscaler_core::resources::is_gpu_class;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use nodepools::NodeClaim;
use nodepools::conditions::{self, reasons};

use super::keys;
use super::translate::{epoch_seconds, node_ready};

/// Where a NodeClaim is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Written, not launched yet (or the launch call has not returned).
    Pending,
    /// The provider created the instance.
    Launched,
    /// A Node with the instance's providerID joined.
    Registered,
    /// The Node is Ready, its startup taints are gone and its GPUs are advertised.
    Initialized,
    /// The launch failed; the claim is to be deleted.
    Failed,
    /// The claim is being deleted.
    Deleting,
}

impl Phase {
    /// Lower-case name for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Launched => "launched",
            Phase::Registered => "registered",
            Phase::Initialized => "initialized",
            Phase::Failed => "failed",
            Phase::Deleting => "deleting",
        }
    }

    /// Every phase, for metrics.
    pub const ALL: [Phase; 6] = [
        Phase::Pending,
        Phase::Launched,
        Phase::Registered,
        Phase::Initialized,
        Phase::Failed,
        Phase::Deleting,
    ];
}

/// How long a claim may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From launch to a registered Node (default 15 min).
    pub registration_s: i64,
    /// From launch to an initialized Node (default 15 min).
    pub initialization_s: i64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            registration_s: 900,
            initialization_s: 900,
        }
    }
}

/// The condition of type `type_`, if set.
pub fn condition<'a>(claim: &'a NodeClaim, type_: &str) -> Option<&'a Condition> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

fn is_true(claim: &NodeClaim, type_: &str) -> bool {
    condition(claim, type_).is_some_and(|c| c.status == "True")
}

/// The claim's phase, read off the object.
pub fn phase(claim: &NodeClaim) -> Phase {
    if claim.metadata.deletion_timestamp.is_some() {
        return Phase::Deleting;
    }
    if let Some(c) = condition(claim, conditions::LAUNCHED)
        && c.status == "False"
        && c.reason != reasons::LAUNCH_PENDING
    {
        return Phase::Failed;
    }
    if is_true(claim, conditions::INITIALIZED) {
        Phase::Initialized
    } else if is_true(claim, conditions::REGISTERED) {
        Phase::Registered
    } else if is_true(claim, conditions::LAUNCHED) {
        Phase::Launched
    } else {
        Phase::Pending
    }
}

/// The claim's providerID, once launched.
pub fn provider_id(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

/// Why a registered Node is not initialized yet, or `None` when it is: Ready, none of the
/// claim's startup taints left, and non-zero allocatable for every GPU-class resource the
/// claim asked for.
pub fn not_initialized(claim: &NodeClaim, node: &Node) -> Option<(&'static str, String)> {
    if !node_ready(node) {
        return Some((reasons::NODE_NOT_READY, "the Node is not Ready".into()));
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    for st in &claim.spec.startup_taints {
        if taints
            .iter()
            .any(|t| t.key == st.key && t.effect == st.effect)
        {
            return Some((
                reasons::STARTUP_TAINTS_EXIST,
                format!(
                    "startup taint {}:{} is still on the Node",
                    st.key, st.effect
                ),
            ));
        }
    }
    let alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    for name in claim.spec.resources.requests.keys() {
        if !is_gpu_class(name) {
            continue;
        }
        let zero = alloc
            .and_then(|a| a.get(name))
            .is_none_or(|q| q.0.trim() == "0" || q.0.trim().is_empty());
        if zero {
            return Some((
                reasons::DEVICE_PLUGIN_NOT_READY,
                format!("{name} allocatable is zero (device plugin not up)"),
            ));
        }
    }
    None
}

/// What the runtime should do next for one claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to do now.
    Wait,
    /// Put the termination finalizer on the claim before anything else.
    AddFinalizer,
    /// Call the provider (idempotent on the claim's name) and record the instance.
    Launch,
    /// Record the Node: status.nodeName, Registered=True; label and taint the Node and put the
    /// finalizer on it.
    Register {
        /// The Node's name.
        node: String,
    },
    /// Record why the claim is not initialized yet (only when the reason changed).
    NotInitialized {
        /// Condition reason.
        reason: &'static str,
        /// Condition message.
        message: String,
    },
    /// Initialized=True and Ready=True.
    Initialize,
    /// Delete the claim (its finalizer then terminates everything).
    Delete {
        /// Why, for the log and the event.
        reason: String,
    },
    /// The claim is being deleted: delete the Node, terminate the instance, then release the
    /// claim's finalizer.
    Terminate {
        /// The instance to terminate, if it was launched.
        provider_id: Option<String>,
        /// The Node to delete, if one registered.
        node: Option<String>,
    },
}

/// Seconds since the claim launched (or since it was created, when the Launched condition has
/// no time).
fn since_launch(claim: &NodeClaim, now: i64) -> i64 {
    let at = condition(claim, conditions::LAUNCHED)
        .map(|c| epoch_seconds(&c.last_transition_time))
        .or_else(|| {
            claim
                .metadata
                .creation_timestamp
                .as_ref()
                .map(epoch_seconds)
        })
        .unwrap_or(now);
    now - at
}

/// Decides the next action for `claim`, given the Node carrying its providerID (if any).
pub fn step(claim: &NodeClaim, node: Option<&Node>, now: i64, timeouts: &Timeouts) -> Action {
    let has_finalizer = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == keys::FINALIZER);
    let phase = phase(claim);
    if phase == Phase::Deleting {
        if !has_finalizer {
            return Action::Wait;
        }
        return Action::Terminate {
            provider_id: provider_id(claim).map(str::to_string),
            node: node
                .and_then(|n| n.metadata.name.clone())
                .or_else(|| claim.status.as_ref().and_then(|s| s.node_name.clone())),
        };
    }
    if !has_finalizer {
        return Action::AddFinalizer;
    }
    let node_gone = || Action::Delete {
        reason: "its Node was deleted".into(),
    };
    match phase {
        Phase::Deleting => Action::Wait,
        Phase::Failed => Action::Delete {
            reason: condition(claim, conditions::LAUNCHED)
                .map(|c| format!("launch failed: {}", c.message))
                .unwrap_or_else(|| "launch failed".into()),
        },
        Phase::Pending => Action::Launch,
        Phase::Launched => match node {
            Some(n) => Action::Register {
                node: n.metadata.name.clone().unwrap_or_default(),
            },
            None if since_launch(claim, now) >= timeouts.registration_s => Action::Delete {
                reason: format!(
                    "no Node registered within {}s of the launch",
                    timeouts.registration_s
                ),
            },
            None => Action::Wait,
        },
        Phase::Registered => {
            let Some(n) = node else {
                return node_gone();
            };
            match not_initialized(claim, n) {
                None => Action::Initialize,
                Some(_) if since_launch(claim, now) >= timeouts.initialization_s => {
                    Action::Delete {
                        reason: format!(
                            "the Node did not initialize within {}s of the launch",
                            timeouts.initialization_s
                        ),
                    }
                }
                Some((reason, message)) => {
                    let current = condition(claim, conditions::INITIALIZED);
                    if current.is_some_and(|c| c.reason == reason && c.message == message) {
                        Action::Wait
                    } else {
                        Action::NotInitialized { reason, message }
                    }
                }
            }
        }
        Phase::Initialized => match node {
            Some(_) => Action::Wait,
            None => node_gone(),
        },
    }
}

#[cfg(test)]
mod tests;
