//! The `CloudProvider` trait and the values that cross it.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use autoscaler_core::{CapacityType, InstanceType, Labels, Taint};

use crate::error::ProviderError;

/// Tags every provider puts on the instances it launches, so that they can be listed per
/// cluster and traced back to their NodeClaim after a crash.
pub mod tags {
    /// The cluster the instance belongs to; [`super::CloudProvider::list`] filters on it.
    pub const CLUSTER: &str = "gpu-autoscaler.dev/cluster";
    /// The NodeClaim that launched the instance (also the launch's idempotency token).
    pub const CLAIM: &str = "gpu-autoscaler.dev/nodeclaim";
    /// The NodePool of that claim.
    pub const POOL: &str = autoscaler_core::labels::NODEPOOL;
}

/// Which provider-specific node class (image, subnets, IAM role, ...) to use.
///
/// The provider-facing twin of the NodePool API's `nodeClassRef`; the shell converts one into
/// the other so that this crate does not depend on the Kubernetes API types.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeClassRef {
    /// API group of the class (`fake.gpu-autoscaler.dev`).
    pub group: String,
    /// Kind of the class (`FakeNodeClass`).
    pub kind: String,
    /// Name of the class object.
    pub name: String,
}

/// One thing a provider can be asked to launch: an instance type in a zone as spot or on-demand.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingKey {
    /// Instance type name.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
}

impl OfferingKey {
    /// Builds a key.
    pub fn new(
        instance_type: impl Into<String>,
        zone: impl Into<String>,
        capacity_type: CapacityType,
    ) -> Self {
        OfferingKey {
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type,
        }
    }
}

impl fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.instance_type, self.zone, self.capacity_type
        )
    }
}

/// What to launch for one NodeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRequest {
    /// NodeClaim name: the idempotency token, and the value of the [`tags::CLAIM`] tag.
    pub claim: String,
    /// Owning NodePool, tagged as [`tags::POOL`].
    pub pool: String,
    /// The node class to launch with.
    pub class: NodeClassRef,
    /// Acceptable offerings, most preferred (usually cheapest) first; the provider takes the
    /// first one it can get.
    pub candidates: Vec<OfferingKey>,
    /// Labels the node registers with.
    pub labels: Labels,
    /// Taints the node registers with.
    pub taints: Vec<Taint>,
    /// Taints present at registration until an agent (device plugin, CNI...) removes them.
    pub startup_taints: Vec<Taint>,
}

/// Lifecycle of a cloud instance as providers report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstanceState {
    /// Requested, not running yet.
    Pending,
    /// Running.
    Running,
    /// Being terminated.
    ShuttingDown,
    /// Gone; still visible for a while on some clouds.
    Terminated,
}

/// A cloud instance.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// The node's `spec.providerID` (`aws:///us-east-1a/i-0abc`, `fake:///zone-a/fake-1`).
    pub provider_id: String,
    /// The NodeClaim from the [`tags::CLAIM`] tag; `None` for an instance without one (which
    /// garbage collection removes).
    pub claim: Option<String>,
    /// The NodePool from the [`tags::POOL`] tag.
    pub pool: Option<String>,
    /// Instance type name.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour of the offering it was launched from, when known.
    pub price: Option<f64>,
    /// Lifecycle state.
    pub state: InstanceState,
    /// All tags.
    pub tags: BTreeMap<String, String>,
}

impl Instance {
    /// The key of the offering the instance runs on.
    pub fn offering(&self) -> OfferingKey {
        OfferingKey::new(&self.instance_type, &self.zone, self.capacity_type)
    }
}

/// A successful launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Launched {
    /// The instance.
    pub instance: Instance,
    /// Candidates tried before the one that succeeded and refused for lack of capacity: the
    /// caller feeds them to its [`crate::UnavailableOfferings`] so the next plan avoids them.
    pub unavailable: Vec<OfferingKey>,
}

/// A cloud that can launch and terminate nodes.
///
/// Methods are async (`impl Future + Send`) because real implementations call cloud SDKs on
/// tokio; implementors may write `async fn`. Futures must be `Send` so that the shell can run
/// them on a multi-threaded runtime. The trait is not object-safe; callers are generic over it.
///
/// Every method may be retried by the caller after any error except
/// [`ProviderError::InvalidRequest`]; implementations must make retries safe as documented per
/// method. Implementations do not read a clock or keep an insufficient-capacity cache of their
/// own: the caller owns [`crate::UnavailableOfferings`] and passes time in.
pub trait CloudProvider: Send + Sync {
    /// Short provider name (`aws`, `gcp`, `fake`), the scheme of its provider ids.
    fn name(&self) -> &str;

    /// The instance types `class` can launch, with their offerings and prices.
    ///
    /// Read-only, so always safe to retry. Offerings are reported as available; the caller
    /// overlays its insufficient-capacity cache.
    fn instance_types(
        &self,
        class: &NodeClassRef,
    ) -> impl Future<Output = Result<Vec<InstanceType>, ProviderError>> + Send;

    /// Launches one instance for `request.claim`, trying `request.candidates` in order.
    ///
    /// Idempotent per claim: `request.claim` is the idempotency token, so a retry after a
    /// timeout or crash returns the instance the first call created instead of a second one
    /// (for as long as the cloud remembers the token; the claim tag lets [`Self::list`] find it
    /// afterwards). The instance is tagged with [`tags::CLUSTER`], [`tags::CLAIM`] and
    /// [`tags::POOL`].
    ///
    /// # Errors
    /// [`ProviderError::InsufficientCapacity`] naming every candidate when none could be
    /// launched (retry with other candidates after marking these unavailable);
    /// [`ProviderError::InvalidRequest`] for an empty candidate list or an unknown instance type
    /// (do not retry); [`ProviderError::Throttled`] / [`ProviderError::Other`] (retry with
    /// backoff: the idempotency token makes that safe).
    fn launch(
        &self,
        request: &LaunchRequest,
    ) -> impl Future<Output = Result<Launched, ProviderError>> + Send;

    /// Terminates the instance `provider_id`.
    ///
    /// Idempotent: an instance already terminated, terminating or unknown is `Ok`, so a retry
    /// after any error is safe.
    ///
    /// # Errors
    /// [`ProviderError::Throttled`] / [`ProviderError::Other`]: retry with backoff.
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), ProviderError>> + Send;

    /// The instance `provider_id`.
    ///
    /// Read-only, safe to retry. A recently terminated instance may still be returned with
    /// [`InstanceState::Terminated`]; callers treat that and `NotFound` alike.
    ///
    /// # Errors
    /// [`ProviderError::NotFound`] when the cloud does not know the id (any more).
    fn get(
        &self,
        provider_id: &str,
    ) -> impl Future<Output = Result<Instance, ProviderError>> + Send;

    /// Every live (not terminated) instance tagged as this cluster's, claim or not, sorted by
    /// provider id: the input of garbage collection for instances without a NodeClaim.
    ///
    /// Read-only, safe to retry.
    fn list(&self) -> impl Future<Output = Result<Vec<Instance>, ProviderError>> + Send;

    /// Whether [`Self::launch_group`] is an atomic cloud primitive here (all instances or none,
    /// decided by the cloud). Callers use it for all-or-nothing groups and otherwise launch one
    /// claim at a time and roll back themselves. Default: `false`.
    fn atomic_groups(&self) -> bool {
        false
    }

    /// Launches one instance per request, all or none, when [`Self::atomic_groups`] says the
    /// cloud can. The requests share one template (pool, class, labels, taints, candidates);
    /// only the claim differs. Returns the launches in request order.
    ///
    /// Idempotent per group (the set of claims): a retry returns the group's instances rather
    /// than creating it again.
    ///
    /// # Errors
    /// As [`Self::launch`]: [`ProviderError::InsufficientCapacity`] when no candidate could
    /// host the whole group (nothing was created); [`ProviderError::InvalidRequest`] for
    /// requests that do not share a template, and always from the default implementation
    /// (no atomic primitive).
    fn launch_group(
        &self,
        requests: &[LaunchRequest],
    ) -> impl Future<Output = Result<Vec<Launched>, ProviderError>> + Send {
        let n = requests.len();
        async move {
            Err(ProviderError::InvalidRequest {
                action: crate::error::Action::Launch,
                why: format!(
                    "{} has no atomic group launch (asked for {n} instances)",
                    self.name()
                ),
            })
        }
    }
}
