//! The provisioning plan: where every pending pod goes, the NodeClaims to create, and why the
//! pods that cannot be helped cannot be.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::instance::CapacityType;
use crate::model::PodKey;
use crate::requirements::{Labels, Requirements};
use crate::resources::Resources;
use crate::taints::Taint;

/// A pod put on an existing node or an in-flight claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The pod.
    pub pod: PodKey,
    /// Node name (existing) or NodeClaim name (in flight).
    pub target: String,
}

/// One acceptable instance type of a new claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimOption {
    /// Instance type name.
    pub instance_type: Arc<str>,
    /// Cheapest acceptable offering's hourly price.
    pub price: f64,
    /// Acceptable (zone, capacity type, price) offerings, cheapest first. Shared between the
    /// options of every claim that accepts all of its type's offerings: a large plan writes
    /// hundreds of thousands of options, most of them alike.
    pub offerings: Arc<[(Arc<str>, CapacityType, f64)]>,
}

impl ClaimOption {
    /// Keeps the offerings `keep` accepts, in order; the list is copied only when one goes.
    /// The option's `price` is left as it was.
    pub fn retain_offerings(
        &mut self,
        mut keep: impl FnMut(&(Arc<str>, CapacityType, f64)) -> bool,
    ) {
        if !self.offerings.iter().all(&mut keep) {
            self.offerings = self.offerings.iter().filter(|o| keep(o)).cloned().collect();
        }
    }
}

/// A NodeClaim the plan wants created.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewClaim {
    /// Plan-local name (`<pool>-<n>`); the shell makes it unique in the cluster.
    pub name: String,
    /// Owning NodePool.
    pub pool: String,
    /// Acceptable instance types, cheapest first, at most the configured maximum (60); every
    /// one of them fits every pod of the claim plus DaemonSet overhead.
    pub instance_types: Vec<ClaimOption>,
    /// Resolved requirements: the pool's, the pods' node affinity and any zone pinning.
    pub requirements: Requirements,
    /// Labels the node gets from its NodePool: its `labels`, and a value the claim's pods
    /// allow for each label the pool's requirements define itself
    /// ([`crate::provision::pool_defined_labels`]).
    pub labels: Labels,
    /// Taints the node gets.
    pub taints: Vec<Taint>,
    /// Startup taints the node gets.
    pub startup_taints: Vec<Taint>,
    /// Pods planned onto it.
    pub pods: Vec<PodKey>,
    /// Sum of the pods' requests (fractional GPU shares as whole devices opened) and of the
    /// DaemonSets' that land on its cheapest instance type, as Karpenter's NodeClaim
    /// `spec.resources.requests`.
    pub requests: Resources,
    /// Hourly price of the cheapest option.
    pub price: f64,
    /// Physical GPUs of the cheapest option.
    pub gpus: u32,
    /// The all-or-nothing group (gang or atomic ProvisioningRequest, as in
    /// [`crate::model::Pod::group`]) this claim is one node of, when the nodes should be placed
    /// close together (a placement group where the cloud has them).
    ///
    /// Set only when every pod of the claim belongs to this one group and the group's pods land
    /// on at least two new claims of the plan: a group on a single new node needs no placement
    /// group, and a node shared with pods outside the group is not the group's to place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// One node of an atomic NodePool's scale-up ([`crate::model::Pool::atomic_nodes`]): the
    /// plan holds every node the pool lacks, with one template, some perhaps without pods;
    /// they are launched together, all or none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub atomic: bool,
    /// Some pod planned onto it has DRA claims: its node is ready for them only once its
    /// ResourceSlices are published (the controller waits for them before initializing it),
    /// for a launch and a disruption's replacement alike.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dra: bool,
    /// Under [`crate::model::MinValuesPolicy::BestEffort`], the NodePool's `minValues` this
    /// claim's instance types could not meet, each lowered to the number of distinct values
    /// they do span: what the NodeClaim's requirement carries instead of the pool's, as
    /// Karpenter writes it (with its `nodeclaim-min-values-relaxed` annotation). Empty when
    /// every `minValues` was met, and always under `Strict`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_values_relaxed: BTreeMap<String, u32>,
    /// Opened without pods to bring its NodePool up to `minNodes`
    /// ([`crate::provision::PlanOptions::min_nodes`]): its instance types are every type of the
    /// pool that stays within the limits, cheapest first, as the pool's template allows them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
}

/// A NodePool the plan could not bring up to its `minNodes`
/// ([`crate::provision::PlanOptions::min_nodes`]), and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MinNodesShort {
    /// The NodePool.
    pub pool: String,
    /// Nodes it lacks after this plan (existing, in flight and planned counted).
    pub missing: u32,
    /// Why no further node was planned, e.g. `NodePool gpu limit nodes=2 reached`.
    pub reason: String,
}

/// A pod the plan could not help, with a human-readable reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unschedulable {
    /// The pod.
    pub pod: PodKey,
    /// Why, e.g. `no instance type in NodePool gpu-train offers 16 nvidia.com/gpu`.
    pub reason: String,
    /// The NodePools whose limits (`spec.limits`, `gpuLimits`) refused every instance type
    /// that would otherwise have taken the pod, sorted: the pod is held back by a limit, not by
    /// a mismatch (the controller's `LimitReached` events). Empty when no limit was in the way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limited_by: Vec<String>,
}

/// The result of [`crate::provision::plan_provisioning`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Pods that fit on existing nodes.
    pub existing: Vec<Placement>,
    /// Pods that fit on claims already in flight.
    pub in_flight: Vec<Placement>,
    /// Claims to create.
    pub new_claims: Vec<NewClaim>,
    /// Pods that cannot be helped.
    pub unschedulable: Vec<Unschedulable>,
    /// Pods left for a later plan because this one opened its most new claims
    /// ([`crate::provision::PlanOptions::max_new_claims`]), sorted. They can be helped: they
    /// stay pending, with no event, and are planned again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deferred: Vec<PodKey>,
    /// NodePools left below their `minNodes` when the plan was asked to reach them
    /// ([`crate::provision::PlanOptions::min_nodes`]), by pool name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub min_nodes_short: Vec<MinNodesShort>,
}

impl Plan {
    /// Hourly cost of the new claims (cheapest option of each).
    pub fn new_cost(&self) -> f64 {
        self.new_claims.iter().map(|c| c.price).sum()
    }

    /// A compact, stable text rendering for snapshot tests and `explain`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for p in &self.existing {
            let _ = writeln!(s, "existing {} -> {}", p.pod, p.target);
        }
        for p in &self.in_flight {
            let _ = writeln!(s, "in-flight {} -> {}", p.pod, p.target);
        }
        for c in &self.new_claims {
            let types: Vec<&str> = c.instance_types.iter().map(|o| &*o.instance_type).collect();
            let pods: Vec<String> = c.pods.iter().map(|p| p.name.clone()).collect();
            let _ = writeln!(
                s,
                "claim {} pool={} price={:.3} types=[{}] pods=[{}]",
                c.name,
                c.pool,
                c.price,
                types.join(","),
                pods.join(",")
            );
            if !c.requirements.is_empty() {
                let _ = writeln!(s, "  requirements: {}", c.requirements);
            }
            if let Some(g) = &c.group {
                let _ = writeln!(s, "  group: {g}");
            }
            if c.atomic {
                let _ = writeln!(s, "  atomic");
            }
            if c.warm {
                let _ = writeln!(s, "  warm (minNodes)");
            }
            if !c.min_values_relaxed.is_empty() {
                let relaxed: Vec<String> = c
                    .min_values_relaxed
                    .iter()
                    .map(|(k, n)| format!("{k}={n}"))
                    .collect();
                let _ = writeln!(s, "  minValues relaxed: {}", relaxed.join(","));
            }
        }
        for u in &self.unschedulable {
            let _ = writeln!(s, "unschedulable {}: {}", u.pod, u.reason);
        }
        for d in &self.deferred {
            let _ = writeln!(s, "deferred {d}");
        }
        for m in &self.min_nodes_short {
            let _ = writeln!(
                s,
                "minNodes short {} by {}: {}",
                m.pool, m.missing, m.reason
            );
        }
        s
    }
}
