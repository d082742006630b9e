//! The snapshot built from literal objects: claims in flight, folded pods, other autoscalers' taints.

use autoscaler_core::builders::itype;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;

fn arc<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

#[test]
fn registered_claim_is_in_flight_and_its_node_not_initialized() {
    let pool: Arc<NodePool> = arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {"template": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}}
    }));
    let claim: Arc<NodeClaim> = arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": "gpu-a", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodePool": "gpu", "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]}
        ]},
        "status": {"providerID": "kwok://gpu-a", "nodeName": "gpu-a", "instanceType": "g4dn.xlarge",
            "zone": "us-east-1a", "capacityType": "on-demand",
            "conditions": [
                {"type": "Launched", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Registered", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-01-01T00:00:02Z"}
            ]}
    }));
    let node: Arc<Node> = arc(json!({
        "metadata": {"name": "gpu-a", "uid": "n1", "labels": {
            "gpu-autoscaler.dev/nodepool": "gpu",
            "node.kubernetes.io/instance-type": "g4dn.xlarge",
            "topology.kubernetes.io/zone": "us-east-1a",
            "karpenter.sh/capacity-type": "on-demand"
        }},
        "spec": {"providerID": "kwok://gpu-a"},
        "status": {"allocatable": {"cpu": "4", "nvidia.com/gpu": "0"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }));
    let pending: Arc<Pod> = arc(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "p1", "resourceVersion": "5"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }));
    let not_batched: Arc<Pod> = arc(json!({
        "metadata": {"name": "q", "namespace": "default", "uid": "p2"},
        "spec": {"containers": [{"name": "c"}]}
    }));
    let g4dn = itype("g4dn.xlarge")
        .cpu("4")
        .mem("16Gi")
        .gpus(1, "T4", 16)
        .on_demand(&["us-east-1a"], 0.526)
        .build();
    let types = BTreeMap::from([("gpu".to_string(), Arc::new(vec![g4dn]))]);
    let batch = BTreeSet::from([translate::pod_key(&pending)]);
    let cached = |p: &Arc<Pod>| Arc::new(CachedPod::from(p.as_ref().clone()));
    let mut b = SnapshotBuilder::new();
    let built = b.build(&Inputs {
        pods: &[cached(&pending), cached(&not_batched)],
        nodes: &[node],
        pools: &[pool],
        claims: &[claim],
        daemonsets: &[],
        pdbs: &[],
        instance_types: &types,
        pending: &batch,
        gangs: &Default::default(),
        dra: &Default::default(),
        volumes: &Default::default(),
    });
    assert!(built.problems.is_empty(), "{:?}", built.problems);
    let s = &built.snapshot;
    assert_eq!(s.pending.len(), 1);
    assert_eq!(s.in_flight.len(), 1);
    assert_eq!(
        s.in_flight[0].instance_types,
        vec!["g4dn.xlarge".to_string()]
    );
    assert_eq!(s.nodes.len(), 1);
    assert!(!s.nodes[0].initialized);
    assert_eq!(s.nodes[0].claim.as_deref(), Some("gpu-a"));
    assert_eq!(s.nodes[0].pool.as_deref(), Some("gpu"));
    let plan = autoscaler_core::plan_provisioning(s);
    assert!(plan.new_claims.is_empty(), "{}", plan.render());
    assert_eq!(plan.in_flight.len(), 1, "{}", plan.render());
}

/// A Node that registered before its claim's launch was recorded (the status write after
/// the cloud call failed) is not a disruption candidate: the bench reliability run deleted
/// such a Node as empty and its instance registered it again, stranding the command.
#[test]
fn a_pool_labelled_node_no_claim_records_is_not_initialized() {
    let pool: Arc<NodePool> = arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "general"}, "spec": {"template": {}}
    }));
    // Created and launched, but the launch's status write was lost: no providerID.
    let claim: Arc<NodeClaim> = arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": "general-a", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodePool": "general", "requirements": []}
    }));
    let mut labelled = node_json("general-a");
    labelled["spec"] = json!({"providerID": "kwok://general-a"});
    labelled["status"] = json!({"allocatable": {"cpu": "4", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}]});
    let mut other = labelled.clone();
    other["metadata"]["name"] = json!("other");
    other["metadata"]["labels"] = json!({"kubernetes.io/hostname": "other"});
    other["spec"] = json!({"providerID": "aws:///us-east-1a/i-1"});
    let built = SnapshotBuilder::new().build(&Inputs {
        pods: &[],
        nodes: &[arc(labelled), arc(other)],
        pools: &[pool],
        claims: &[claim],
        daemonsets: &[],
        pdbs: &[],
        instance_types: &BTreeMap::new(),
        pending: &BTreeSet::new(),
        gangs: &Default::default(),
        dra: &Default::default(),
        volumes: &Default::default(),
    });
    let by_name = |n: &str| {
        built
            .snapshot
            .nodes
            .iter()
            .find(|x| x.name == n)
            .unwrap_or_else(|| panic!("{n} in {:?}", built.problems))
    };
    let a = by_name("general-a");
    assert_eq!(a.pool.as_deref(), Some("general"));
    assert_eq!(a.claim, None);
    assert!(!a.initialized, "no claim manages it yet");
    // A Ready node no pool manages is a place pods can go, as before.
    assert!(by_name("other").initialized);
}

fn node_json(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "uid": name, "labels": {
            "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": "m5.xlarge",
            "topology.kubernetes.io/zone": "us-east-1a",
            "gpu-autoscaler.dev/nodepool": "general"
        }},
        "spec": {"providerID": format!("existing://{name}")},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// An initialized claim of `pool` whose instance is `node_json(node)`'s.
fn initialized_claim(node: &str, pool: &str) -> Arc<NodeClaim> {
    let t = "2026-01-01T00:00:00Z";
    let cond = |k: &str| json!({"type": k, "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": t});
    arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": node, "creationTimestamp": t},
        "spec": {"nodePool": pool, "requirements": []},
        "status": {"providerID": format!("existing://{node}"), "nodeName": node,
            "conditions": [cond("Launched"), cond("Registered"), cond("Initialized")]}
    }))
}

/// Inputs of nothing but pods, nodes, NodePools and the pending batch.
fn plain_inputs<'a>(
    pods: &'a [Arc<CachedPod>],
    nodes: &'a [Arc<Node>],
    pools: &'a [Arc<NodePool>],
    types: &'a BTreeMap<String, Arc<Vec<InstanceType>>>,
    pending: &'a BTreeSet<PodKey>,
) -> Inputs<'a> {
    static NO_DRA: std::sync::LazyLock<crate::controller::dra::DraIndex> =
        std::sync::LazyLock::new(Default::default);
    static NO_GANGS: std::sync::LazyLock<crate::controller::gangs::GangObjects> =
        std::sync::LazyLock::new(Default::default);
    static NO_VOLUMES: std::sync::LazyLock<crate::controller::volumes::VolumeIndex> =
        std::sync::LazyLock::new(Default::default);
    Inputs {
        pods,
        nodes,
        pools,
        claims: &[],
        daemonsets: &[],
        pdbs: &[],
        instance_types: types,
        pending,
        gangs: &NO_GANGS,
        dra: &NO_DRA,
        volumes: &NO_VOLUMES,
    }
}

/// NodePool `general` of m5.xlarge nodes (empty nodes removable at once), with its catalog.
fn general_pool() -> (Arc<NodePool>, BTreeMap<String, Arc<Vec<InstanceType>>>) {
    let pool = arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"template": {}, "disruption": {"consolidateAfter": "0s", "unneededTime": "0s",
                 "budgets": [{"nodes": "100%"}]}}
    }));
    let m5 = itype("m5.xlarge")
        .cpu("4")
        .mem("16Gi")
        .on_demand(&["us-east-1a"], 0.192)
        .build();
    (
        pool,
        BTreeMap::from([("general".to_string(), Arc::new(vec![m5]))]),
    )
}

/// A pod in `ns` labelled `app`, bound to `node` or pending, with extra spec fields.
fn pod_json(
    ns: &str,
    name: &str,
    app: &str,
    node: Option<&str>,
    cpu: &str,
    extra: serde_json::Value,
) -> Arc<CachedPod> {
    let mut spec = json!({"containers": [{"name": "c",
        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    let status = match node {
        Some(_) => json!({"phase": "Running"}),
        None => json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable"}]}),
    };
    arc(json!({
        "metadata": {"name": name, "namespace": ns, "uid": name, "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                "uid": format!("rs-{app}"), "controller": true}]},
        "spec": spec, "status": status
    }))
}

#[test]
fn folding_plain_bound_pods_plans_as_the_whole_snapshot() {
    let (pool, types) = general_pool();
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "solo"}}}]}}});
    let mut pods = Vec::new();
    for i in 0..8 {
        pods.push(pod_json(
            "a",
            &format!("plain-{i}"),
            "x",
            Some("n1"),
            "300m",
            json!({}),
        ));
    }
    for i in 0..5 {
        pods.push(pod_json(
            "a",
            &format!("other-{i}"),
            "x",
            Some("n2"),
            "500m",
            json!({}),
        ));
    }
    for i in 0..2 {
        pods.push(pod_json(
            "b",
            &format!("web-{i}"),
            "web",
            Some("n1"),
            "100m",
            json!({}),
        ));
    }
    pods.push(pod_json(
        "c",
        "solo-0",
        "solo",
        Some("n2"),
        "100m",
        anti.clone(),
    ));
    for i in 0..4 {
        pods.push(pod_json(
            "b",
            &format!("new-web-{i}"),
            "web",
            None,
            "500m",
            spread.clone(),
        ));
    }
    for i in 1..3 {
        pods.push(pod_json(
            "c",
            &format!("solo-{i}"),
            "solo",
            None,
            "200m",
            anti.clone(),
        ));
    }
    for i in 0..3 {
        pods.push(pod_json(
            "d",
            &format!("batch-{i}"),
            "batch",
            None,
            "1",
            json!({}),
        ));
    }
    let batch: BTreeSet<PodKey> = pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .map(|p| p.key.clone())
        .collect();
    let nodes: Vec<Arc<Node>> = ["n1", "n2"].iter().map(|n| arc(node_json(n))).collect();
    let pools = [pool];
    let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
    let mut b = SnapshotBuilder::new();
    let whole = b.build(&inputs);
    let folded = b.build_for_provisioning(&inputs);
    assert!(whole.problems.is_empty(), "{:?}", whole.problems);
    let counts = |s: &Snapshot| s.nodes.iter().map(|n| n.pods.len()).collect::<Vec<_>>();
    assert_eq!(counts(&whole.snapshot), vec![10, 6]);
    // n1: the web pods stay (a pending pod's spread selects namespace b), the rest folds;
    // n2: the anti-affinity pod stays.
    assert_eq!(counts(&folded.snapshot), vec![3, 2]);
    let sum = |s: &Snapshot, i: usize| {
        let mut r = autoscaler_core::resources::Resources::new();
        s.nodes[i].pods.iter().for_each(|p| r.add(&p.requests));
        r
    };
    for i in 0..2 {
        assert_eq!(sum(&whole.snapshot, i), sum(&folded.snapshot, i));
    }
    let a = autoscaler_core::plan_provisioning(&whole.snapshot);
    let b = autoscaler_core::plan_provisioning(&folded.snapshot);
    assert!(
        !a.existing.is_empty() && !a.new_claims.is_empty(),
        "{}",
        a.render()
    );
    assert_eq!(a.render(), b.render());
}

#[test]
fn folding_keeps_whole_the_namespaces_a_pending_pods_term_names() {
    // The pending pod follows the `x` pods of namespace `a` onto their node: they must keep
    // their labels in the folded snapshot, or the plan would differ from the whole one.
    let (pool, types) = general_pool();
    let near = |namespaces: serde_json::Value| {
        json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}},
             "namespaces": namespaces}]}}})
    };
    // (term's namespaces, case, pods the folded node keeps: the three `x` pods, and the two
    // pods of namespace `b` whole when the term may look there, else folded into one)
    for (namespaces, name, kept) in [
        (json!(["a"]), "listed", 4),
        (json!(null), "all", 5),
        (json!(null), "labelled", 4),
    ] {
        let mut term = near(namespaces);
        let selector = match name {
            "all" => Some(json!({})),
            // Namespace `a` is labelled `tier=cache`, `b` is not.
            "labelled" => Some(json!({"matchLabels": {"tier": "cache"}})),
            _ => None,
        };
        if let Some(sel) = selector {
            term["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
                ["namespaceSelector"] = sel;
        }
        let mut pods: Vec<_> = (0..3)
            .map(|i| pod_json("a", &format!("x-{i}"), "x", Some("n1"), "300m", json!({})))
            .collect();
        pods.extend(
            (0..2).map(|i| pod_json("b", &format!("y-{i}"), "y", Some("n1"), "100m", json!({}))),
        );
        pods.push(pod_json("c", "near", "near", None, "200m", term));
        let batch: BTreeSet<PodKey> = pods
            .iter()
            .filter(|p| p.node_name.is_none())
            .map(|p| p.key.clone())
            .collect();
        let nodes: Vec<Arc<Node>> = vec![arc(node_json("n1"))];
        let pools = [pool.clone()];
        let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
        let mut b = SnapshotBuilder {
            namespaces: BTreeMap::from([
                (
                    "a".to_string(),
                    [("tier".to_string(), "cache".to_string())].into(),
                ),
                ("b".to_string(), Labels::new()),
            ]),
            ..SnapshotBuilder::default()
        };
        let whole = b.build(&inputs);
        let folded = b.build_for_provisioning(&inputs);
        assert_eq!(folded.snapshot.nodes[0].pods.len(), kept, "{name}");
        let a = autoscaler_core::plan_provisioning(&whole.snapshot);
        let f = autoscaler_core::plan_provisioning(&folded.snapshot);
        assert_eq!(a.existing.len(), 1, "{name}: {}", a.render());
        assert_eq!(a.render(), f.render(), "{name}");
    }
}

#[test]
fn folded_pods_keep_the_host_ports_they_bind() {
    let (pool, types) = general_pool();
    let port = |p: u16| {
        json!({"containers": [{"name": "c", "ports": [{"containerPort": p, "hostPort": p}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]})
    };
    let pods = vec![
        pod_json("a", "first", "x", Some("n1"), "100m", port(9000)),
        pod_json("a", "second", "x", Some("n1"), "100m", port(9001)),
        pod_json("d", "wants-9001", "y", None, "100m", port(9001)),
    ];
    let batch: BTreeSet<PodKey> = pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .map(|p| p.key.clone())
        .collect();
    let nodes: Vec<Arc<Node>> = vec![arc(node_json("n1"))];
    let pools = [pool];
    let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
    let mut b = SnapshotBuilder::new();
    let folded = b.build_for_provisioning(&inputs);
    // Both bound pods fold into one, which still binds both ports.
    assert_eq!(folded.snapshot.nodes[0].pods.len(), 1);
    let plan = autoscaler_core::plan_provisioning(&folded.snapshot);
    assert!(plan.existing.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    let whole = autoscaler_core::plan_provisioning(&b.build(&inputs).snapshot);
    assert_eq!(plan.render(), whole.render());
}

/// Mixed clusters: a node the Cluster Autoscaler or Karpenter is removing is not capacity,
/// and a pod the Cluster Autoscaler's annotation calls a DaemonSet pod is one.
#[test]
fn the_cluster_autoscalers_and_karpenters_vocabulary_on_foreign_objects() {
    let (pool, types) = general_pool();
    let mut pods = vec![pod_json("a", "web", "web", None, "1", json!({}))];
    let raw: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": "a", "uid": "agent",
            "annotations": {"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"}},
        "spec": {"nodeName": "n-ca", "containers": [{"name": "c",
            "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    let agent = CachedPod::from(raw);
    pods.push(Arc::new(agent));
    let mut nodes = Vec::new();
    for (name, key, effect) in [
        ("n-ca", "ToBeDeletedByClusterAutoscaler", "NoSchedule"),
        (
            "n-cand",
            "DeletionCandidateOfClusterAutoscaler",
            "PreferNoSchedule",
        ),
        ("n-karp", "karpenter.sh/disrupted", "NoSchedule"),
    ] {
        let mut n = node_json(name);
        n["spec"]["taints"] = json!([{"key": key, "value": "1700000000", "effect": effect}]);
        nodes.push(arc(n));
    }
    let batch = BTreeSet::from([PodKey {
        namespace: "a".into(),
        name: "web".into(),
    }]);
    let pools = [pool];
    let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
    let built = SnapshotBuilder::new().build(&inputs);
    let s = &built.snapshot;
    // The taints stay on the nodes for the core to read (`keys::foreign_removal`).
    assert!(s.nodes.iter().all(|n| n.going()), "{:?}", s.nodes);
    let agent = s.nodes[0]
        .pods
        .iter()
        .find(|p| p.key.name == "agent")
        .expect("agent");
    assert!(agent.is_daemonset(), "{agent:?}");
    // The pending pod gets a new node: none of the three is capacity.
    let plan = autoscaler_core::plan_provisioning(s);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}

#[test]
fn disruption_folds_only_nodes_no_nodepool_manages() {
    let (pool, types) = general_pool();
    // web-1 must share a host with a web pod: it can move only next to web-0, so web-0
    // must survive the folding for the plans to agree.
    let with_web = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}}});
    let mut pods = Vec::new();
    // The unmanaged node: plain pods (fold) and a web pod that a movable pod's affinity
    // selects (kept).
    for i in 0..6 {
        pods.push(pod_json(
            "a",
            &format!("plain-{i}"),
            "x",
            Some("static"),
            "250m",
            json!({}),
        ));
    }
    pods.push(pod_json(
        "b",
        "web-0",
        "web",
        Some("static"),
        "100m",
        json!({}),
    ));
    // The managed node: a lightly used candidate whose pods may move.
    pods.push(pod_json(
        "b",
        "web-1",
        "web",
        Some("managed"),
        "100m",
        with_web,
    ));
    pods.push(pod_json(
        "a",
        "plain-m",
        "x",
        Some("managed"),
        "200m",
        json!({}),
    ));
    let mut unmanaged = node_json("static");
    unmanaged["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("gpu-autoscaler.dev/nodepool");
    unmanaged["spec"] = json!({});
    let nodes = vec![arc(unmanaged), arc(node_json("managed"))];
    let batch = BTreeSet::new();
    let pools = [pool];
    let claims = [initialized_claim("managed", "general")];
    let inputs = Inputs {
        claims: &claims,
        ..plain_inputs(&pods, &nodes, &pools, &types, &batch)
    };
    let mut b = SnapshotBuilder::new();
    let whole = b.build(&inputs);
    let folded = b.build_for_disruption(&inputs);
    let counts = |s: &Snapshot| s.nodes.iter().map(|n| n.pods.len()).collect::<Vec<_>>();
    // Nodes by name: managed, static.
    assert_eq!(counts(&whole.snapshot), vec![2, 7]);
    // managed: untouched; static: six plain pods fold into one, web-0 stays.
    assert_eq!(counts(&folded.snapshot), vec![2, 2]);
    let config = autoscaler_core::disruption::DisruptionConfig::default();
    let state = autoscaler_core::disruption::DisruptionState::default();
    let a = autoscaler_core::disruption::plan_disruption(&whole.snapshot, &state, 0, &config);
    let c = autoscaler_core::disruption::plan_disruption(&folded.snapshot, &state, 0, &config);
    assert!(
        !a.commands.is_empty(),
        "the managed node's pods fit on the static node: {:?}",
        a.verdicts
    );
    assert_eq!(a.commands, c.commands);
    assert_eq!(a.verdicts, c.verdicts);
}

#[test]
fn the_watchs_pod_events_count_when_the_claims_lag_behind() {
    use autoscaler_core::builders::node;
    let t = itype("m")
        .cpu("4")
        .mem("16Gi")
        .on_demand(&["z1"], 1.0)
        .build();
    let mut snap = Snapshot {
        nodes: [
            "written-earlier",
            "never-written",
            "written-later",
            "no-event",
        ]
        .iter()
        .map(|n| node(n, &t, "z1").build())
        .collect(),
        ..Snapshot::default()
    };
    snap.nodes[0].last_pod_event = Some(100);
    snap.nodes[2].last_pod_event = Some(300);
    snap.nodes[3].last_pod_event = Some(50);
    let events: HashMap<Arc<str>, i64> = [
        (Arc::from("written-earlier"), 103),
        (Arc::from("never-written"), 7),
        (Arc::from("written-later"), 200),
    ]
    .into();
    take_pod_events(&mut snap, &events);
    let got: Vec<Option<i64>> = snap.nodes.iter().map(|n| n.last_pod_event).collect();
    assert_eq!(got, vec![Some(103), Some(7), Some(300), Some(50)]);
}

/// A Volcano gang's members already running count toward its `minMember`, as Volcano counts
/// them: the pending ones need only the rest, and plan one by one once the minimum runs.
/// Without running members the minimum stays whole, even above the pending count.
#[test]
fn running_gang_members_count_toward_the_minimum() {
    let (pool, types) = general_pool();
    let member = |name: &str, node: Option<&str>| -> Arc<CachedPod> {
        let mut spec = json!({"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "500m"}}}]});
        let status = match node {
            Some(n) => {
                spec["nodeName"] = json!(n);
                json!({"phase": "Running"})
            }
            None => json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable"}]}),
        };
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "uid": name,
                "annotations": {"scheduling.k8s.io/group-name": "vc"}},
            "spec": spec, "status": status
        }))
        .unwrap();
        Arc::new(CachedPod::from(pod))
    };
    let with_group = crate::controller::gangs::GangObjects {
        volcano: BTreeMap::from([("ml/vc".to_string(), Some(8))]),
        volcano_served: true,
        ..Default::default()
    };
    let nodes = [arc(node_json("n1"))];
    let build = |gangs: &crate::controller::gangs::GangObjects, running: usize, pending: usize| {
        let mut pods: Vec<Arc<CachedPod>> = (0..running)
            .map(|i| member(&format!("run-{i}"), Some("n1")))
            .collect();
        pods.extend((0..pending).map(|i| member(&format!("wait-{i}"), None)));
        let batch: BTreeSet<PodKey> = pods
            .iter()
            .filter(|p| p.node_name.is_none())
            .map(|p| p.key.clone())
            .collect();
        let pools = [pool.clone()];
        let mut inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
        inputs.gangs = gangs;
        let built = SnapshotBuilder::new().build(&inputs);
        assert!(built.problems.is_empty(), "{:?}", built.problems);
        let s = built.snapshot;
        let min = s.groups.get("volcano:ml/vc").map(|g| g.min_count);
        let grouped = s.pending.iter().filter(|p| p.group.is_some()).count();
        (min, grouped, s.pending.len(), built.refused)
    };
    let g = &with_group;
    assert_eq!(
        build(g, 0, 6),
        (Some(8), 6, 6, vec![]),
        "none running: all 8"
    );
    assert_eq!(build(g, 6, 3), (Some(2), 3, 3, vec![]), "6 running: 2 of 3");
    assert_eq!(
        build(g, 8, 2),
        (None, 0, 2, vec![]),
        "minimum runs: no gang"
    );
    // The PodGroup not created yet while its API is served: its pods wait for it.
    let (_, _, pending, refused) = build(
        &crate::controller::gangs::GangObjects {
            volcano_served: true,
            ..Default::default()
        },
        0,
        2,
    );
    assert_eq!(pending, 0);
    assert_eq!(refused.len(), 2);
    assert_eq!(
        refused[0].1,
        "waiting: Volcano PodGroup ml/vc does not exist yet"
    );
}

/// `--preference-policy=ignore`: the builder drops a pending pod's preferred node affinity,
/// preferred pod affinity and anti-affinity and `ScheduleAnyway` spread, and keeps its
/// `DoNotSchedule` spread and required terms; by default it keeps them all.
#[test]
fn ignoring_preferences_drops_preferred_terms_and_soft_spreads_only() {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "p"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "affinity": {
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["big"]}]}}]},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "cache"}}}}]},
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 2, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "p"}}}}],
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "topology.kubernetes.io/zone",
                         "labelSelector": {"matchLabels": {"app": "db"}}}]}},
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                 "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "p"}}},
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                 "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "p"}}}]
        },
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap();
    let pods = vec![Arc::new(CachedPod::from(pod))];
    let pending = BTreeSet::from([pods[0].key.clone()]);
    let build = |ignore: bool| {
        let mut b = SnapshotBuilder {
            ignore_preferences: ignore,
            ..SnapshotBuilder::default()
        };
        b.build(&Inputs {
            pods: &pods,
            nodes: &[],
            pools: &[],
            claims: &[],
            daemonsets: &[],
            pdbs: &[],
            instance_types: &BTreeMap::new(),
            pending: &pending,
            gangs: &Default::default(),
            dra: &Default::default(),
            volumes: &Default::default(),
        })
        .snapshot
    };
    let kept = build(false);
    assert_eq!(kept.pending[0].preferred.len(), 1);
    assert_eq!(kept.pending[0].preferred_affinity.len(), 1);
    assert_eq!(kept.pending[0].preferred_anti_affinity.len(), 1);
    assert_eq!(kept.pending[0].spread.len(), 2);
    let dropped = build(true);
    assert!(dropped.pending[0].preferred.is_empty());
    assert!(dropped.pending[0].preferred_affinity.is_empty());
    assert!(dropped.pending[0].preferred_anti_affinity.is_empty());
    assert_eq!(dropped.pending[0].anti_affinity.len(), 1);
    let spreads: Vec<(bool, &str)> = dropped.pending[0]
        .spread
        .iter()
        .map(|t| (t.hard, t.topology_key.as_str()))
        .collect();
    assert_eq!(spreads, vec![(true, "kubernetes.io/hostname")]);
}

/// `--min-values-policy` reaches every snapshot the builder makes, for provisioning and for
/// disruption (whose simulations plan replacements under it); `Strict` by default.
#[test]
fn the_min_values_policy_reaches_provisioning_and_disruption_snapshots() {
    use autoscaler_core::model::MinValuesPolicy;
    let pending = BTreeSet::new();
    let types = BTreeMap::new();
    let inputs = plain_inputs(&[], &[], &[], &types, &pending);
    assert_eq!(
        SnapshotBuilder::new()
            .build(&inputs)
            .snapshot
            .min_values_policy,
        MinValuesPolicy::Strict
    );
    let mut b = SnapshotBuilder {
        min_values_policy: MinValuesPolicy::BestEffort,
        ..SnapshotBuilder::default()
    };
    for built in [
        b.build_for_provisioning(&inputs),
        b.build_for_disruption(&inputs),
    ] {
        assert_eq!(
            built.snapshot.min_values_policy,
            MinValuesPolicy::BestEffort
        );
    }
}

mod daemonsets;
mod karpenter_volumes;
mod volumes;
