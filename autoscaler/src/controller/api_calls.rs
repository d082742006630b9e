//! The single list of Kubernetes API calls the controller makes.
//!
//! Every request the controller sends goes through [`check`] (a debug assertion), so a call
//! missing from [`API_CALLS`] fails the end-to-end tests; the deploy test compares the rendered
//! RBAC rules of `deploy/` with this list in both directions, so the ServiceAccount can do
//! exactly what the controller does and nothing more.

/// When a call is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum When {
    /// With every provider.
    Always,
    /// Only with `--provider kwok` (it creates Nodes and keeps its instances as objects).
    Kwok,
}

/// Where the permission is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Cluster-wide (ClusterRole).
    Cluster,
    /// The controller's own namespace (Role): leader election, the status ConfigMap.
    OwnNamespace,
}

/// One resource and the verbs used on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Resource, with `/subresource` where one is used.
    pub resource: &'static str,
    /// RBAC verbs.
    pub verbs: &'static [&'static str],
    /// Where.
    pub scope: Scope,
    /// With which provider.
    pub when: When,
}

const fn call(
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
) -> ApiCall {
    ApiCall {
        group,
        resource,
        verbs,
        scope: Scope::Cluster,
        when: When::Always,
    }
}

/// Every call, by resource.
pub const API_CALLS: &[ApiCall] = &[
    // Reflectors; deletion of the pods still on a node past its NodeClaim's
    // terminationGracePeriod (Karpenter deletes them rather than evicting).
    call("", "pods", &["list", "watch", "delete"]),
    call("apps", "daemonsets", &["list", "watch"]),
    call("policy", "poddisruptionbudgets", &["list", "watch"]),
    // Volume topology: where a pod's PersistentVolumeClaims let it run.
    call("", "persistentvolumeclaims", &["list", "watch"]),
    call("", "persistentvolumes", &["list", "watch"]),
    call("storage.k8s.io", "storageclasses", &["list", "watch"]),
    // Volume limits: how many volumes each CSI driver may attach to a node.
    call("storage.k8s.io", "csinodes", &["list", "watch"]),
    // Pod affinity terms whose namespaceSelector reads namespace labels.
    call("", "namespaces", &["list", "watch"]),
    // A drained node's instance waits for its volumes to detach.
    call("storage.k8s.io", "volumeattachments", &["list", "watch"]),
    // Draining.
    call("", "pods/eviction", &["create"]),
    // Registration (labels, taints, finalizer), disruption taint, deletion.
    call("", "nodes", &["list", "watch", "patch", "delete"]),
    call("gpu-autoscaler.dev", "nodepools", &["list", "watch"]),
    call("gpu-autoscaler.dev", "nodepools/status", &["patch"]),
    call(
        "gpu-autoscaler.dev",
        "nodeclaims",
        &["list", "watch", "create", "patch", "delete"],
    ),
    call("gpu-autoscaler.dev", "nodeclaims/status", &["patch"]),
    // Cluster-wide limits, read only.
    call("gpu-autoscaler.dev", "capacityquotas", &["list", "watch"]),
    // Price and capacity overrides of instance types, read only.
    call("gpu-autoscaler.dev", "nodeoverlays", &["list", "watch"]),
    // Kueue's ProvisioningRequests and their PodTemplates (when the CRD is installed);
    // terminal requests are deleted only with `--provreq-retention`.
    call("", "podtemplates", &["list", "watch"]),
    call(
        "autoscaling.x-k8s.io",
        "provisioningrequests",
        &["list", "watch", "delete"],
    ),
    call(
        "autoscaling.x-k8s.io",
        "provisioningrequests/status",
        &["patch"],
    ),
    // Gang minimums: Volcano PodGroups and Kubernetes PodGroups, when served.
    call("scheduling.volcano.sh", "podgroups", &["list", "watch"]),
    call("scheduling.k8s.io", "podgroups", &["list", "watch"]),
    // Dynamic Resource Allocation (when `resource.k8s.io/v1` is served), read only.
    call("resource.k8s.io", "resourceclaims", &["list", "watch"]),
    call(
        "resource.k8s.io",
        "resourceclaimtemplates",
        &["list", "watch"],
    ),
    call("resource.k8s.io", "deviceclasses", &["list", "watch"]),
    call("resource.k8s.io", "resourceslices", &["list", "watch"]),
    // Events on pods, nodes and NodeClaims (kube-runtime's recorder creates, then patches series).
    call("events.k8s.io", "events", &["create", "patch"]),
    // Leader election.
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "update"],
        scope: Scope::OwnNamespace,
        when: When::Always,
    },
    // The cluster status summary (`gpu-autoscaler-status`), by server-side apply (which the
    // API server authorizes as `create` when the ConfigMap does not exist yet).
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["create", "patch"],
        scope: Scope::OwnNamespace,
        when: When::Always,
    },
    // The kwok provider: Nodes are its machines, KwokInstances its cloud's instance table.
    ApiCall {
        group: "",
        resource: "nodes",
        verbs: &["create"],
        scope: Scope::Cluster,
        when: When::Kwok,
    },
    ApiCall {
        group: "",
        resource: "nodes/status",
        verbs: &["patch"],
        scope: Scope::Cluster,
        when: When::Kwok,
    },
    ApiCall {
        group: "kwok.gpu-autoscaler.dev",
        resource: "kwokinstances",
        verbs: &["get", "list", "create", "delete"],
        scope: Scope::Cluster,
        when: When::Kwok,
    },
];

/// Whether `verb` on `group`/`resource` is in [`API_CALLS`] (for any provider).
pub fn listed(group: &str, resource: &str, verb: &str) -> bool {
    API_CALLS
        .iter()
        .any(|c| c.group == group && c.resource == resource && c.verbs.contains(&verb))
}

/// Asserts (in debug builds) that a call about to be made is listed.
pub fn check(group: &str, resource: &str, verb: &str) {
    debug_assert!(
        listed(group, resource, verb),
        "API call {verb} {group}/{resource} is not in controller::api_calls::API_CALLS"
    );
}

/// The `(group, resource, verb)` triples for a provider, sorted: what RBAC must grant.
pub fn triples(kwok: bool, scope: Scope) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = API_CALLS
        .iter()
        .filter(|c| c.scope == scope && (c.when == When::Always || kwok))
        .flat_map(|c| {
            c.verbs
                .iter()
                .map(|v| (c.group.to_string(), c.resource.to_string(), v.to_string()))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
