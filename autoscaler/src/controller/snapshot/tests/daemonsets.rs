//! DaemonSet overhead in the built snapshot: sized by the DaemonSet's newest pod, or its
//! template when it has none.

use super::*;

/// DaemonSet `kube-system/agent` (UID `ds-agent`) whose template asks for `cpu`, with extra
/// template spec fields.
fn agent_daemonset(cpu: &str, extra: serde_json::Value) -> Arc<DaemonSet> {
    let mut spec = json!({"containers": [{"name": "a",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    arc(json!({
        "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": spec}}
    }))
}

/// A pod of `agent` as the DaemonSet controller makes it, created at `created` and bound to
/// `node`, asking for `cpu` (what a LimitRange or a webhook made of the template's request).
/// The controller replaces the template's required node affinity with a term naming the
/// pod's node and adds its own tolerations.
fn agent_pod(name: &str, node: &str, cpu: &str, created: &str) -> Arc<CachedPod> {
    let tolerations: Vec<serde_json::Value> = [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
    .iter()
    .map(|(k, e)| json!({"key": k, "operator": "Exists", "effect": e}))
    .collect();
    arc(json!({
        "metadata": {"name": name, "namespace": "kube-system", "uid": name,
            "creationTimestamp": created, "labels": {"app": "agent"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                "uid": "ds-agent", "controller": true}]},
        "spec": {"nodeName": node,
            "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
            "tolerations": tolerations},
        "status": {"phase": "Running"}
    }))
}

/// NodePool `general` (nodes labelled `team: infra`) with m5.xlarge (4 CPUs) and m5.2xlarge
/// (8 CPUs): a 3-CPU pod fits the small one only beside less than one CPU of DaemonSets.
fn two_size_pool() -> (Arc<NodePool>, BTreeMap<String, Arc<Vec<InstanceType>>>) {
    let pool = arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"template": {"metadata": {"labels": {"team": "infra"}}}}
    }));
    let sized = |name: &str, cpu: &str, price: f64| {
        itype(name)
            .cpu(cpu)
            .mem("32Gi")
            .on_demand(&["us-east-1a"], price)
            .build()
    };
    let types = vec![
        sized("m5.xlarge", "4", 0.192),
        sized("m5.2xlarge", "8", 0.384),
    ];
    (
        pool,
        BTreeMap::from([("general".to_string(), Arc::new(types))]),
    )
}

/// The snapshot of `daemonsets` and `pods` with a pending 3-CPU pod `default/web`, and the
/// plan for it.
fn plan_beside_daemonsets(
    daemonsets: &[Arc<DaemonSet>],
    mut pods: Vec<Arc<CachedPod>>,
) -> (Snapshot, autoscaler_core::plan::Plan) {
    let (pool, types) = two_size_pool();
    pods.push(pod_json("default", "web", "web", None, "3", json!({})));
    let batch = BTreeSet::from([PodKey {
        namespace: "default".into(),
        name: "web".into(),
    }]);
    let pools = [pool];
    let mut inputs = plain_inputs(&pods, &[], &pools, &types, &batch);
    inputs.daemonsets = daemonsets;
    let built = SnapshotBuilder::new().build_for_provisioning(&inputs);
    assert!(built.problems.is_empty(), "{:?}", built.problems);
    let plan = autoscaler_core::plan_provisioning(&built.snapshot);
    (built.snapshot, plan)
}

/// The cheapest instance type of the plan's one claim, and the CPU it requests.
fn one_claim(plan: &autoscaler_core::plan::Plan) -> (&str, i64) {
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    let c = &plan.new_claims[0];
    (&*c.instance_types[0].instance_type, c.requests.cpu)
}

/// A LimitRange or a mutating webhook gives the DaemonSet's pods more than its template asks
/// for: the overhead follows the newest pod (not the largest, not the oldest), so the new node
/// is sized for what lands on it. A DaemonSet with no pod of its own is sized by its template.
#[test]
fn each_daemonset_is_sized_by_its_newest_pod_or_else_its_template() {
    let logger: Arc<DaemonSet> = arc(json!({
        "metadata": {"name": "logger", "namespace": "kube-system", "uid": "ds-logger"},
        "spec": {"selector": {"matchLabels": {"app": "logger"}},
            "template": {"metadata": {"labels": {"app": "logger"}}, "spec": {"containers": [
                {"name": "l", "resources": {"requests": {"cpu": "200m"}}}]}}}
    }));
    // Not a pod of logger: logger only co-owns it.
    let coowned = arc(json!({
        "metadata": {"name": "stray", "namespace": "kube-system", "uid": "stray",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logger",
                "uid": "ds-logger", "controller": false}]},
        "spec": {"nodeName": "n-1", "containers": [{"name": "l",
            "resources": {"requests": {"cpu": "2"}}}]},
        "status": {"phase": "Running"}
    }));
    let (snap, plan) = plan_beside_daemonsets(
        &[agent_daemonset("100m", json!({})), logger],
        vec![
            agent_pod("agent-new", "n-2", "1500m", "2026-01-01T00:05:00Z"),
            agent_pod("agent-old", "n-1", "2", "2026-01-01T00:00:00Z"),
            coowned,
        ],
    );
    let cpu = |name: &str| {
        snap.daemonsets
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.requests.cpu)
    };
    assert_eq!(
        cpu("kube-system/agent"),
        Some(1500),
        "{:?}",
        snap.daemonsets
    );
    assert_eq!(
        cpu("kube-system/logger"),
        Some(200),
        "{:?}",
        snap.daemonsets
    );
    // 3 + 1.5 + 0.2 CPUs: the template's 0.1 would have left the pod room on the small type.
    assert_eq!(one_claim(&plan), ("m5.2xlarge", 4700), "{}", plan.render());
}

/// Karpenter's "should account for overhead using daemonset pod spec instead of daemonset
/// spec": the pod asks for less than the template, and the pod is what counts.
#[test]
fn should_account_for_overhead_using_daemonset_pod_spec_instead_of_daemonset_spec() {
    let (_, plan) = plan_beside_daemonsets(
        &[agent_daemonset("2", json!({}))],
        vec![agent_pod("agent-a", "n-1", "500m", "2026-01-01T00:00:00Z")],
    );
    assert_eq!(one_claim(&plan), ("m5.xlarge", 3500), "{}", plan.render());
}

/// Karpenter's "should remove daemonset node hostname affinity when considering daemonset
/// schedulability": the pod's requests, the template's node affinity (here `team: infra`, a
/// label of the pool's nodes), never the term naming the node the pod runs on, which would
/// keep the overhead off every new node.
#[test]
fn should_remove_daemonset_node_hostname_affinity_when_considering_daemonset_schedulability() {
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "team", "operator": "In", "values": ["infra"]}]}]}}}});
    for (template, want) in [(json!({}), 0), (affinity, 1)] {
        let (snap, plan) = plan_beside_daemonsets(
            &[agent_daemonset("100m", template)],
            vec![agent_pod("agent-a", "n-1", "1500m", "2026-01-01T00:00:00Z")],
        );
        let terms = &snap.daemonsets[0].node_selector.terms;
        assert_eq!(terms.len(), want, "{terms:?}");
        assert!(
            terms
                .iter()
                .all(|t| t.get(autoscaler_core::labels::HOSTNAME).is_none()),
            "{terms:?}"
        );
        assert_eq!(one_claim(&plan), ("m5.2xlarge", 4500), "{}", plan.render());
    }
}
