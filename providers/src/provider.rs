//! The `CloudProvider` trait and the values that cross it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

use autoscaler_core::model::GpuSharing;
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
    /// The placement group the instance was launched into (only when it was), so that garbage
    /// collection can tell groups in use from groups left over.
    pub const PLACEMENT_GROUP: &str = "gpu-autoscaler.dev/placement-group";
}

/// How long a cloud placement group name may be: GCP resource names (`[a-z]([-a-z0-9]{0,61}
/// [a-z0-9])?`) are the tightest limit; AWS allows 255 characters.
pub const PLACEMENT_GROUP_NAME_MAX: usize = 63;

/// 64-bit FNV-1a of `parts` (each followed by a zero byte): stable across builds and platforms.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Lower-case letters, digits and single dashes of `s`, at most `max` characters, without a
/// leading or trailing dash.
fn name_part(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(max);
    out.trim_end_matches('-').to_string()
}

/// The cloud placement group name of an all-or-nothing group (`group` as the planner names it,
/// e.g. `volcano:team-a/train`) in `cluster`:
/// `gpu-autoscaler-<cluster>-<group>-<hash>`, the two middle parts reduced to lower-case
/// letters, digits and dashes and shortened so the whole is at most
/// [`PLACEMENT_GROUP_NAME_MAX`] characters, the hash (8 hex digits of cluster and group) keeping
/// distinct groups apart after shortening.
///
/// Deterministic, so every claim of a group and every retry after a crash names the same
/// group; valid as an AWS placement group name, a GCP resource policy name and a Kubernetes
/// label value.
pub fn placement_group_name(cluster: &str, group: &str) -> String {
    let hash = fnv1a(&[cluster, group]) & 0xffff_ffff;
    // "gpu-autoscaler-" (15) + cluster (<= 16) + "-" + group + "-" + 8 hex digits.
    let cluster = name_part(cluster, 16);
    let mut name = String::from("gpu-autoscaler-");
    if !cluster.is_empty() {
        name.push_str(&cluster);
        name.push('-');
    }
    let room = PLACEMENT_GROUP_NAME_MAX - name.len() - 9;
    let group = name_part(group, room);
    if !group.is_empty() {
        name.push_str(&group);
        name.push('-');
    }
    name.push_str(&format!("{hash:08x}"));
    name
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

pub use autoscaler_core::offerings::OfferingKey;

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
    /// The placement group to launch into, when the claim is one node of an all-or-nothing
    /// group spread over several nodes (see [`placement_group_name`]); every claim of the group
    /// names the same one. A preference, not a requirement: see [`CloudProvider::launch`].
    pub placement_group: Option<String>,
    /// How the NodePool says the node's GPUs are shared (time-slicing, MIG): what its device
    /// plugin is expected to advertise. Clouds do not act on it; the kwok provider's emulated
    /// device plugin advertises the node accordingly.
    pub gpu_sharing: GpuSharing,
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
/// method. Implementations do not keep an insufficient-capacity cache of their own: the caller
/// owns [`crate::UnavailableOfferings`] and passes time in. The one use of a clock is aging the
/// placement groups a provider creates (see [`Self::collect_placement_groups`]), where a cloud
/// does not record a group's creation time itself.
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
    /// With [`LaunchRequest::placement_group`], a provider whose cloud has placement groups
    /// (AWS `cluster` placement groups, GCP collocated group placement policies) first makes
    /// sure a group of that name exists, tagged with [`tags::CLUSTER`] (creating one that
    /// exists already is success, so concurrent launches of a group's claims and retries are
    /// safe), launches into it and tags the instance with [`tags::PLACEMENT_GROUP`]. When the
    /// cloud has no capacity for a candidate inside the group, the provider launches without
    /// the group instead of failing: the group is a preference. Providers without placement
    /// groups ignore the field.
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

    /// Deletes this cluster's placement groups (those [`Self::launch`] created, tagged with
    /// [`tags::CLUSTER`]) that are no longer needed: no instance of `live` (the answer of
    /// [`Self::list`]) is in one, `keep` does not name it (the caller passes the groups its
    /// NodeClaims still name, launched or not), and it is at least `grace_s` seconds old, so
    /// that a group created for a launch in progress survives. Returns the names deleted.
    ///
    /// Idempotent: a group already gone, or one the cloud refuses to delete because an
    /// instance is still in it, is skipped, so a retry after any error is safe. Default: no
    /// placement groups, nothing to do.
    ///
    /// # Errors
    /// [`ProviderError::Throttled`] / [`ProviderError::Other`]: retry at the next collection.
    fn collect_placement_groups(
        &self,
        live: &[Instance],
        keep: &BTreeSet<String>,
        grace_s: i64,
    ) -> impl Future<Output = Result<Vec<String>, ProviderError>> + Send {
        let _ = (live, keep, grace_s);
        async { Ok(Vec::new()) }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn gcp_valid(n: &str) -> bool {
        let b = n.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b[0].is_ascii_lowercase()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && !n.ends_with('-')
    }

    #[test]
    fn placement_group_names_are_readable_stable_and_distinct() {
        let n = placement_group_name("prod", "volcano:team-a/train");
        assert!(
            n.starts_with("gpu-autoscaler-prod-volcano-team-a-train-"),
            "{n}"
        );
        assert_eq!(n, placement_group_name("prod", "volcano:team-a/train"));
        assert_ne!(n, placement_group_name("prod", "volcano:team-b/train"));
        assert_ne!(n, placement_group_name("staging", "volcano:team-a/train"));
        assert!(gcp_valid(&n), "{n}");
    }

    #[test]
    fn placement_group_names_fit_every_cloud_whatever_the_input() {
        let long = "k8s:Some_Namespace-With.A.Very.Long.Name/".repeat(5);
        let cases = [
            ("", ""),
            ("prod", ""),
            ("", "x"),
            ("---", "///"),
            ("ÜBER", "gang/ÄÖ"),
            ("a-very-long-cluster-name-indeed-much-longer", long.as_str()),
        ];
        for (c, g) in cases {
            let n = placement_group_name(c, g);
            assert!(gcp_valid(&n), "{c:?} {g:?} -> {n:?}");
        }
        // Two groups that shorten alike stay apart by the hash.
        let a = placement_group_name("prod", &format!("{long}a"));
        let b = placement_group_name("prod", &format!("{long}b"));
        assert_ne!(a, b);
        assert_eq!(a.len(), PLACEMENT_GROUP_NAME_MAX);
    }
}
