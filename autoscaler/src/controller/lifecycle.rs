//! The NodeClaim lifecycle as an explicit state machine.
//!
//! ```text
//! Pending ──launch──▶ Launched ──Node with providerID──▶ Registered ──Ready, no startup
//!    │                   │                                  │          or ephemeral taints,
//!    │                   │                                  │          every device
//!    │                   │                                  │          delivered──▶ Initialized
//!    │                   │                                  │ fewer devices than launched for,
//!    │                   │                                  │ past the device-plugin timeout
//!    │                   │                                  ▼
//!    │                   │                        Registered (Initialized=False,
//!    │                   │                                    reason ResourceMismatch)
//!    └─launch failed─▶ Failed        registration timeout   │ initialization timeout
//!                        │                 │                │
//!                        └────────────────▶ Deleting ◀──────┘  (claim deleted: terminate the
//!                                                              instance, delete the Node,
//!                                                              release the finalizer)
//! ```
//!
//! **A Node that lost its finalizer.** While the claim is Registered or Initialized, its live
//! Node must carry the finalizer (deleting it must drain it and end the claim). A kubelet that
//! registers its Node again after a deletion writes a Node without it; the step then answers
//! [`Action::Reregister`] before anything else.
//!
//! **Delivered capacity.** A claim records at launch what its node was launched as
//! (`status.allocatable`: the instance type with the NodePool's GPU sharing applied). A Node
//! that advertises less of a GPU-class resource (or of another extended resource the claim's
//! pods asked for) is given the device-plugin timeout to catch up; after that the claim is
//! `Initialized=False` with reason `ResourceMismatch` and the numbers ([`Action::ResourceMismatch`]),
//! stays in that state (the planner no longer counts on it once the runtime excludes its shape)
//! until the Node catches up or the initialization timeout deletes it.
//!
//! **MIG.** A claim of a NodePool that partitions its GPUs with MIG carries the pool's
//! `nvidia.com/mig.config` label, which the runtime copies onto its Node; the GPU Operator's MIG
//! manager applies that geometry and reports it in `nvidia.com/mig.config.state`. Once a Node
//! carries that state label, until it carries the claim's configuration with state `success`
//! (a Node without the label, where MIG is applied otherwise, is judged by its devices alone),
//! the claim is
//! `Initialized=False` with reason `MIGNotApplied` and no device shortfall is judged (the
//! manager pauses the device plugin, may reboot the Node, and whole GPUs show meanwhile): a
//! geometry whose instance count equals the GPU count would otherwise be initialized with whole
//! GPUs, and any other be reported short and relaunched. State `failed` is a
//! `ResourceMismatch` at once (the shape is set aside, as for a Node that came up short). The
//! initialization timeout still applies.
//!
//! **DRA devices.** A claim launched for pods with DRA claims, or as a disruption's
//! replacement for such pods (annotation [`keys::DRA_ANNOTATION`], set by
//! `run::claim_object` from the planner's `NewClaim::dra`), is initialized only once its Node's ResourceSlices publish, for
//! every driver, at least as many devices as the instance type's template predicts
//! ([`DraDevices`]; the runtime counts both); until then `Initialized=False` with reason
//! `ResourceSlicesNotPublished`, and the initialization timeout still applies.
//!
//! [`phase`] reads the state off the object (its conditions and deletionTimestamp), so the
//! controller keeps no state of its own across restarts; [`step`] decides the one action to
//! take next from the claim, its Node and `now`. Both are pure; the runtime performs the action.

use std::collections::BTreeMap;

use autoscaler_core::keys::is_known_ephemeral_taint;
use autoscaler_core::resources::is_gpu_class;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use nodepools::NodeClaim;
use nodepools::conditions::{self, reasons};

use super::keys;
use super::translate::{self, epoch_seconds, node_ready};

/// Where a NodeClaim is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Written, not launched yet (or the launch call has not returned).
    Pending,
    /// The provider created the instance.
    Launched,
    /// A Node with the instance's providerID joined.
    Registered,
    /// The Node is Ready, its startup taints and known ephemeral taints are gone and its GPUs
    /// are advertised.
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
    /// From registration until a Node advertising fewer devices than its claim was launched
    /// for is reported as a mismatch (default 5 min).
    pub device_plugin_s: i64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            registration_s: 900,
            initialization_s: 900,
            device_plugin_s: 300,
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
/// claim's startup taints left, no known ephemeral taint
/// ([`autoscaler_core::keys::is_known_ephemeral_taint`]: a Node Readiness Controller's
/// `readiness.k8s.io/` taint, the cloud controller manager's `uninitialized`), MIG applied
/// where asked, and non-zero allocatable for every GPU-class resource the claim asked for.
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
    if let Some(t) = taints
        .iter()
        .find(|t| is_known_ephemeral_taint(&t.key, &t.effect))
    {
        return Some((
            reasons::KNOWN_EPHEMERAL_TAINTS_EXIST,
            format!(
                "ephemeral taint {}:{} is still on the Node",
                t.key, t.effect
            ),
        ));
    }
    if let Mig::Applying(message) = mig(claim, node) {
        return Some((reasons::MIG_NOT_APPLIED, message));
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

/// DRA devices per driver: what the claim's instance type's template predicts, and what the
/// Node's ResourceSlices publish (newest generation of each pool).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DraDevices {
    /// Devices per driver the template predicts.
    pub expected: BTreeMap<String, usize>,
    /// Devices per driver the Node's slices publish.
    pub published: BTreeMap<String, usize>,
}

impl DraDevices {
    /// What is not published yet (`gpu.nvidia.com 0 of 8`), or `None` when every driver
    /// publishes at least what is expected.
    pub fn missing(&self) -> Option<String> {
        let short: Vec<String> = self
            .expected
            .iter()
            .filter_map(|(driver, want)| {
                let have = self.published.get(driver).copied().unwrap_or(0);
                (have < *want).then(|| format!("{driver} {have} of {want}"))
            })
            .collect();
        (!short.is_empty()).then(|| short.join(", "))
    }
}

/// A resource the Node advertises less of than its claim was launched for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// Resource name (`nvidia.com/gpu`).
    pub resource: String,
    /// What the Node advertises (allocatable).
    pub registered: i64,
    /// What the claim was launched for.
    pub expected: i64,
}

/// The resources `node` advertises less of than `claim` was launched for, in name order:
/// every GPU-class resource of the claim's `status.allocatable`, and the other extended
/// resources there that the claim's pods asked for (a resource no pod asked for strands no
/// pod, and clusters often run without the plugins of such extras). CPU, memory and pods are
/// not compared: kubelet reserves differ from the catalog's estimate. Unreadable quantities
/// compare as nothing expected (the Node side as nothing advertised).
pub fn shortfalls(claim: &NodeClaim, node: &Node) -> Vec<Shortfall> {
    let Some(status) = claim.status.as_ref() else {
        return Vec::new();
    };
    let Ok(expected) = translate::resources(Some(&status.allocatable), "status.allocatable") else {
        return Vec::new();
    };
    let registered = translate::node_allocatable(node).unwrap_or_default();
    expected
        .extended
        .iter()
        .filter(|(name, _)| {
            is_gpu_class(name) || claim.spec.resources.requests.contains_key(name.as_str())
        })
        .filter_map(|(name, want)| {
            let have = registered.get(name);
            (have < *want).then(|| Shortfall {
                resource: name.clone(),
                registered: have,
                expected: *want,
            })
        })
        .collect()
}

/// `nvidia.com/gpu 4 of 16, ...`.
fn describe(short: &[Shortfall]) -> String {
    short
        .iter()
        .map(|s| format!("{} {} of {}", s.resource, s.registered, s.expected))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `ResourceMismatch` message: the numbers, the instance type and the pool.
fn mismatch_message(claim: &NodeClaim, short: &[Shortfall]) -> String {
    let it = claim
        .status
        .as_ref()
        .and_then(|s| s.instance_type.as_deref())
        .unwrap_or("unknown");
    format!(
        "the Node advertises less than the claim was launched for: {} (instance type {it}, NodePool {})",
        describe(short),
        claim.spec.node_pool
    )
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
    /// The claim's Node is alive without the finalizer: its kubelet registered it again after
    /// it was deleted (or someone stripped the finalizer). Label, taint and finalize it again
    /// as [`Action::Register`] does, without touching the claim's status: deleting such a Node
    /// would remove it at once under its pods, and the still-claimed instance would register
    /// it again.
    Reregister {
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
    /// The Node came up with less than the claim was launched for and the device-plugin
    /// timeout is over: Initialized=False and Ready=False with reason `ResourceMismatch` and
    /// `message`, a Warning Event to the claim and its NodePool, and the shape (NodePool x
    /// instance type) kept out of planning. Returned again only when the message changes.
    ResourceMismatch {
        /// Condition and event message, with the numbers.
        message: String,
    },
    /// Delete the claim (its finalizer then terminates everything).
    Delete {
        /// Why, for the log and the event.
        reason: String,
        /// The claim failed to become a node: the cloud refused its launch for a reason other
        /// than capacity, or its Node did not register or initialize in time. False for a
        /// capacity refusal (the offering is set aside and another tried) and for a Node
        /// someone deleted.
        failed: bool,
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

/// Whether a live Node lacks the controller's finalizer (one being deleted is past helping).
fn lost_finalizer(n: &Node) -> bool {
    n.metadata.deletion_timestamp.is_none() && !keys::has_finalizer(&n.metadata)
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

/// Seconds since the claim's Node registered (since the launch, when not recorded).
fn since_registration(claim: &NodeClaim, now: i64) -> i64 {
    condition(claim, conditions::REGISTERED)
        .filter(|c| c.status == "True")
        .map(|c| now - epoch_seconds(&c.last_transition_time))
        .unwrap_or_else(|| since_launch(claim, now))
}

/// Where the Node of a claim that carries a MIG configuration is with it.
#[derive(Debug, PartialEq, Eq)]
enum Mig {
    /// Applied (or the claim asks for none).
    Applied,
    /// Not yet: the message says what the Node shows.
    Applying(String),
    /// The MIG manager reports it failed.
    Failed(String),
}

/// What the claim's `nvidia.com/mig.config` label asks of Node `n`: `all-disabled` and no
/// label ask for nothing (the GPU Operator writes `all-disabled` itself on MIG-capable nodes).
/// Only a Node the MIG manager reports on (`nvidia.com/mig.config.state` present) is waited
/// for: where MIG is applied otherwise (a node image, GKE's GPU partitioning) no manager ever
/// writes the state, and the devices the Node advertises decide as for any other claim.
fn mig(claim: &NodeClaim, n: &Node) -> Mig {
    use autoscaler_core::labels::{NVIDIA_MIG_CONFIG, NVIDIA_MIG_CONFIG_STATE};
    let Some(want) = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(NVIDIA_MIG_CONFIG))
    else {
        return Mig::Applied;
    };
    if want == autoscaler_core::gpu::mig::DISABLED {
        return Mig::Applied;
    }
    let label = |k: &str| n.metadata.labels.as_ref().and_then(|l| l.get(k));
    let Some(state) = label(NVIDIA_MIG_CONFIG_STATE).map(String::as_str) else {
        return Mig::Applied;
    };
    if let Some(have) = label(NVIDIA_MIG_CONFIG)
        && have != want
    {
        return Mig::Applying(format!(
            "the Node's {NVIDIA_MIG_CONFIG} is {have}, not the claim's {want}"
        ));
    }
    match state {
        "success" => Mig::Applied,
        "failed" => Mig::Failed(format!(
            "the MIG manager failed to apply {want} ({NVIDIA_MIG_CONFIG_STATE}=failed)"
        )),
        other => Mig::Applying(format!(
            "waiting for the MIG manager to apply {want} ({NVIDIA_MIG_CONFIG_STATE}={other})"
        )),
    }
}

/// The Registered phase: wait for the Node, initialize it, or report what it lacks.
fn step_registered(
    claim: &NodeClaim,
    n: &Node,
    dra: Option<&DraDevices>,
    now: i64,
    timeouts: &Timeouts,
) -> Action {
    let mut short = shortfalls(claim, n);
    if dra.is_some() {
        // Its GPUs are the DRA driver's devices, checked against the slices below; the device
        // plugin is off on such Nodes (the driver and the plugin must not both hand out the
        // GPUs), so a GPU resource no pod of the claim asked for is not expected.
        short.retain(|s| {
            !is_gpu_class(&s.resource) || claim.spec.resources.requests.contains_key(&s.resource)
        });
    }
    let waiting = not_initialized(claim, n).or_else(|| {
        let missing = dra.and_then(DraDevices::missing)?;
        Some((
            reasons::RESOURCE_SLICES_NOT_PUBLISHED,
            format!("waiting for the Node's ResourceSlices: {missing}"),
        ))
    });
    if waiting.is_none() && short.is_empty() {
        return Action::Initialize;
    }
    if since_launch(claim, now) >= timeouts.initialization_s {
        let why = match &waiting {
            Some((reason, message)) => format!("{reason}: {message}"),
            None => format!("{}: {}", reasons::DEVICE_PLUGIN_NOT_READY, describe(&short)),
        };
        return Action::Delete {
            reason: format!(
                "the Node did not initialize within {}s of the launch ({why})",
                timeouts.initialization_s
            ),
            failed: true,
        };
    }
    let current = condition(claim, conditions::INITIALIZED);
    let unchanged = |reason: &str, message: &str| {
        current.is_some_and(|c| c.reason == reason && c.message == message)
    };
    let mig = mig(claim, n);
    if let Mig::Failed(message) = mig {
        if unchanged(reasons::RESOURCE_MISMATCH, &message) {
            return Action::Wait;
        }
        return Action::ResourceMismatch { message };
    }
    // While the MIG manager works, the devices shown are not the ones the claim waits for.
    if !short.is_empty()
        && mig == Mig::Applied
        && node_ready(n)
        && since_registration(claim, now) >= timeouts.device_plugin_s
    {
        let message = mismatch_message(claim, &short);
        if unchanged(reasons::RESOURCE_MISMATCH, &message) {
            return Action::Wait;
        }
        return Action::ResourceMismatch { message };
    }
    let (reason, message) = waiting.unwrap_or_else(|| {
        (
            reasons::DEVICE_PLUGIN_NOT_READY,
            format!(
                "waiting for the device plugin to advertise {}",
                describe(&short)
            ),
        )
    });
    if unchanged(reason, &message) {
        Action::Wait
    } else {
        Action::NotInitialized { reason, message }
    }
}

/// Decides the next action for `claim`, given the Node carrying its providerID (if any), for a
/// claim that waits for no DRA devices.
pub fn step(claim: &NodeClaim, node: Option<&Node>, now: i64, timeouts: &Timeouts) -> Action {
    step_with_dra(claim, node, None, now, timeouts)
}

/// [`step`], with the DRA devices the claim waits for (`None`: none).
pub fn step_with_dra(
    claim: &NodeClaim,
    node: Option<&Node>,
    dra: Option<&DraDevices>,
    now: i64,
    timeouts: &Timeouts,
) -> Action {
    let has_finalizer = keys::has_finalizer(&claim.metadata);
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
        failed: false,
    };
    match phase {
        Phase::Deleting => Action::Wait,
        Phase::Failed => {
            let launched = condition(claim, conditions::LAUNCHED);
            Action::Delete {
                reason: launched
                    .map(|c| format!("launch failed: {}", c.message))
                    .unwrap_or_else(|| "launch failed".into()),
                failed: launched.is_none_or(|c| c.reason != reasons::INSUFFICIENT_CAPACITY),
            }
        }
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
                failed: true,
            },
            None => Action::Wait,
        },
        Phase::Registered | Phase::Initialized if node.is_some_and(lost_finalizer) => {
            Action::Reregister {
                node: node
                    .and_then(|n| n.metadata.name.clone())
                    .unwrap_or_default(),
            }
        }
        Phase::Registered => match node {
            Some(n) => step_registered(claim, n, dra, now, timeouts),
            None => node_gone(),
        },
        Phase::Initialized => match node {
            Some(_) => Action::Wait,
            None => node_gone(),
        },
    }
}

#[cfg(test)]
mod tests;
