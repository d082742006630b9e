//! The harness scheduler's tests: one State, nodes and pods as JSON, one pass at a time.

use super::*;

/// One scheduling pass over `st` with kubelet played too.
fn pass(st: &mut State) -> usize {
    schedule_pass(st, &BinderOptions::default())
}

fn add_node(st: &mut State, name: &str, allocatable: Value) {
    let mut alloc = json!({"cpu": "64", "memory": "256Gi", "pods": "110"});
    alloc
        .as_object_mut()
        .unwrap()
        .extend(allocatable.as_object().unwrap().clone());
    let def = st.def("", "nodes").unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}});
    st.create(&def, "", node, &WriteOpts::default()).unwrap();
}

/// A pod with `annotations` whose one container has `limits`; bound to `node` if given.
fn add_pod(st: &mut State, name: &str, annotations: Value, limits: Value, node: Option<&str>) {
    let def = st.def("", "pods").unwrap();
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "1"}, "limits": limits}}]}});
    if let Some(n) = node {
        pod["spec"]["nodeName"] = json!(n);
    }
    st.create(&def, "default", pod, &WriteOpts::default())
        .unwrap();
}

fn share_pod(st: &mut State, name: &str, milli: &str) {
    add_pod(
        st,
        name,
        json!({"gpu-autoscaler.dev/gpu-share": milli}),
        json!({}),
        None,
    );
}

fn delete_pod(st: &mut State, name: &str) {
    let def = st.def("", "pods").unwrap();
    st.delete(&def, "default", name, &Value::Null, &WriteOpts::default())
        .unwrap();
}

/// The pod's node, or the harness's message for why it is unschedulable.
fn placed(st: &State, name: &str) -> Result<String, String> {
    let def = st.def("", "pods").unwrap();
    let p = st.get(&def, "default", name).unwrap();
    match p.pointer("/spec/nodeName").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => Ok(n.to_string()),
        _ => Err(p
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled")
            .and_then(|c| c["message"].as_str())
            .unwrap_or("pending, not looked at")
            .to_string()),
    }
}

fn unschedulable(st: &State, name: &str, says: &str) {
    match placed(st, name) {
        Err(m) if m.contains(says) => {}
        other => panic!("{name}: want unschedulable saying {says:?}, got {other:?}"),
    }
}

/// Creates `object` of `group`/`plural` in `ns` (empty for cluster-scoped kinds).
fn add(st: &mut State, group: &str, plural: &str, ns: &str, object: Value) {
    let def = st.def(group, plural).unwrap();
    st.create(&def, ns, object, &WriteOpts::default()).unwrap();
}

/// A claim of `default` asking `class` for 1Gi, bound to `volume` if given.
fn add_claim(st: &mut State, name: &str, class: Option<&str>, volume: Option<&str>) {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(v) = volume {
        c["spec"]["volumeName"] = json!(v);
    }
    if let Some(k) = class {
        c["spec"]["storageClassName"] = json!(k);
    }
    add(st, "", "persistentvolumeclaims", "default", c);
}

/// A pending pod of `default` whose one volume is `claim`.
fn add_claim_pod(st: &mut State, name: &str, claim: &str) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}});
    add(st, "", "pods", "default", pod);
}

/// Node `node`'s CSINode: each driver with its attach count, if any.
fn add_csinode(st: &mut State, node: &str, drivers: &[(&str, Option<u32>)]) {
    let drivers: Vec<Value> = drivers
        .iter()
        .map(|(name, count)| {
            let mut d = json!({"name": name, "nodeID": format!("i-{node}")});
            if let Some(n) = count {
                d["allocatable"] = json!({"count": n});
            }
            d
        })
        .collect();
    add(
        st,
        "storage.k8s.io",
        "csinodes",
        "",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node},
            "spec": {"drivers": drivers}}),
    );
}

/// A StorageClass named `name` whose volumes `provisioner` creates.
fn add_class(st: &mut State, name: &str, provisioner: &str) {
    add(
        st,
        "storage.k8s.io",
        "storageclasses",
        "",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": provisioner}),
    );
}

#[test]
fn least_allocated_picks_the_emptiest_node_and_first_fit_the_first_by_name() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "a", json!({}));
    add_node(&mut st, "b", json!({}));
    // Node a already runs 10 of its 64 CPUs, node b 2.
    let def = st.def("", "pods").unwrap();
    for (name, node, cpu) in [("on-a", "a", "10"), ("on-b", "b", "2")] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": cpu}}}]}});
        st.create(&def, "default", pod, &WriteOpts::default())
            .unwrap();
    }
    add_pod(&mut st, "first", json!({}), json!({}), None);
    assert_eq!(pass(&mut st), 1);
    assert_eq!(
        placed(&st, "first").as_deref(),
        Ok("a"),
        "first fit by name"
    );
    let least = BinderOptions {
        score: Score::LeastAllocated,
        ..BinderOptions::default()
    };
    add_pod(&mut st, "scored", json!({}), json!({}), None);
    assert_eq!(schedule_pass(&mut st, &least), 1);
    assert_eq!(
        placed(&st, "scored").as_deref(),
        Ok("b"),
        "more room left on b"
    );
}

#[test]
fn least_allocated_scores_gpu_shares_by_what_they_hold() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "g2", json!({"nvidia.com/gpu": "2"}));
    add_node(&mut st, "g1", json!({"nvidia.com/gpu": "2"}));
    // g2 holds half a device in shares, g1 a whole GPU: by CPU and memory alike, by GPU
    // g2 has more left (1.5 of 2 against 1 of 2); first fit by name would pick g1.
    add_pod(
        &mut st,
        "half",
        json!({"gpu-autoscaler.dev/gpu-share": "500"}),
        json!({}),
        Some("g2"),
    );
    add_pod(
        &mut st,
        "whole",
        json!({}),
        json!({"nvidia.com/gpu": "1"}),
        Some("g1"),
    );
    let least = BinderOptions {
        score: Score::LeastAllocated,
        ..BinderOptions::default()
    };
    share_pod(&mut st, "share", "300");
    assert_eq!(schedule_pass(&mut st, &least), 1);
    assert_eq!(placed(&st, "share").as_deref(), Ok("g2"));
    add_pod(
        &mut st,
        "gpu",
        json!({}),
        json!({"nvidia.com/gpu": "1"}),
        None,
    );
    assert_eq!(schedule_pass(&mut st, &least), 1);
    // g2: 0.8 of a device held, 1 device free whole; g1: 1 device free. A whole GPU leaves
    // g2 0.2 of 2 and g1 none, which outweighs g2's one more CPU used.
    assert_eq!(placed(&st, "gpu").as_deref(), Ok("g2"));
}

#[test]
fn a_pod_group_binds_all_or_nothing() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "g2", json!({"nvidia.com/gpu": "2"}));
    let member = |i: u32| format!("train-{i}");
    for i in 0..2 {
        add_pod(
            &mut st,
            &member(i),
            json!({"gpu-autoscaler.dev/pod-group": "train",
                   "gpu-autoscaler.dev/pod-group-min-count": "2"}),
            json!({"nvidia.com/gpu": "2"}),
            None,
        );
    }
    add_pod(&mut st, "solo", json!({}), json!({}), None);
    // One member would fit alone: neither is bound; a pod outside the group still is.
    assert_eq!(pass(&mut st), 1);
    assert_eq!(placed(&st, "solo").as_deref(), Ok("g2"));
    for i in 0..2 {
        let why = placed(&st, &member(i)).unwrap_err();
        assert!(why.contains("1 of its 2 pending members fit"), "{why}");
    }
    add_node(&mut st, "g2b", json!({"nvidia.com/gpu": "2"}));
    // Ordered between the members by name: it must not take the room the group counted on.
    add_pod(
        &mut st,
        "train-0a",
        json!({}),
        json!({"nvidia.com/gpu": "1"}),
        None,
    );
    assert_eq!(pass(&mut st), 2);
    assert!(placed(&st, "train-0a").is_err());
    let mut on: Vec<String> = (0..2).map(|i| placed(&st, &member(i)).unwrap()).collect();
    on.sort();
    assert_eq!(on, ["g2", "g2b"]);
}

/// A pod queued before a group takes its room first: the group is tried against what that
/// pod left, so it waits whole instead of binding three of four members.
#[test]
fn a_group_is_tried_against_the_room_earlier_pods_left() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "g8", json!({"nvidia.com/gpu": "8"}));
    add_pod(
        &mut st,
        "first",
        json!({}),
        json!({"nvidia.com/gpu": "1"}),
        None,
    );
    for i in 0..4 {
        add_pod(
            &mut st,
            &format!("gang-{i}"),
            json!({"gpu-autoscaler.dev/pod-group": "gang",
                   "gpu-autoscaler.dev/pod-group-min-count": "4"}),
            json!({"nvidia.com/gpu": "2"}),
            None,
        );
    }
    assert_eq!(pass(&mut st), 1);
    assert_eq!(placed(&st, "first").as_deref(), Ok("g8"));
    for i in 0..4 {
        unschedulable(&st, &format!("gang-{i}"), "3 of its 4 pending members fit");
    }
    delete_pod(&mut st, "first");
    assert_eq!(pass(&mut st), 4);
}

#[test]
fn time_sliced_replicas_are_allocatable_under_either_name() {
    let mut st = State::new(1000, 16, false);
    // One GPU time-sliced four ways, and one renamed to nvidia.com/gpu.shared.
    add_node(&mut st, "ts", json!({"nvidia.com/gpu": "4"}));
    add_node(&mut st, "ts-renamed", json!({"nvidia.com/gpu.shared": "4"}));
    for i in 0..5 {
        add_pod(
            &mut st,
            &format!("r{i}"),
            json!({}),
            json!({"nvidia.com/gpu": "1"}),
            None,
        );
    }
    add_pod(
        &mut st,
        "shared",
        json!({}),
        json!({"nvidia.com/gpu.shared": "4"}),
        None,
    );
    assert_eq!(pass(&mut st), 5);
    for i in 0..4 {
        assert_eq!(placed(&st, &format!("r{i}")), Ok("ts".into()));
    }
    unschedulable(&st, "r4", "2 Insufficient nvidia.com/gpu");
    assert_eq!(placed(&st, "shared"), Ok("ts-renamed".into()));
}

#[test]
fn mig_profiles_are_extended_resources() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "mig", json!({"nvidia.com/mig-3g.40gb": "2"}));
    for i in 0..3 {
        add_pod(
            &mut st,
            &format!("m{i}"),
            json!({}),
            json!({"nvidia.com/mig-3g.40gb": "1"}),
            None,
        );
    }
    add_pod(
        &mut st,
        "small",
        json!({}),
        json!({"nvidia.com/mig-1g.10gb": "1"}),
        None,
    );
    add_pod(
        &mut st,
        "whole",
        json!({}),
        json!({"nvidia.com/gpu": "1"}),
        None,
    );
    assert_eq!(pass(&mut st), 2);
    assert_eq!(placed(&st, "m1"), Ok("mig".into()));
    unschedulable(&st, "m2", "Insufficient nvidia.com/mig-3g.40gb");
    unschedulable(&st, "small", "Insufficient nvidia.com/mig-1g.10gb");
    unschedulable(&st, "whole", "Insufficient nvidia.com/gpu");
}

#[test]
fn fractional_shares_pack_per_device_and_keep_their_devices() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "n", json!({"nvidia.com/gpu": "2"}));
    share_pod(&mut st, "a", "600");
    share_pod(&mut st, "b", "500");
    assert_eq!(pass(&mut st), 2, "0.6 and 0.5 on two devices");
    // Both devices hold a share: none is free whole, though 0.9 is free in total.
    share_pod(&mut st, "d", "400");
    share_pod(&mut st, "e", "600");
    // Created last, so queued after e (the queue is by priority, then creation).
    add_pod(
        &mut st,
        "whole",
        json!({}),
        json!({"nvidia.com/gpu": "1"}),
        None,
    );
    assert_eq!(pass(&mut st), 1);
    unschedulable(&st, "whole", "1 Insufficient nvidia.com/gpu");
    assert_eq!(placed(&st, "d"), Ok("n".into()), "0.4 fills the 0.6 device");
    unschedulable(
        &st,
        "e",
        "1 node(s) had no nvidia.com/gpu device with 600/1000 free",
    );
    // b leaves: its device is free again, e takes it, and the whole pod still waits.
    delete_pod(&mut st, "b");
    assert_eq!(pass(&mut st), 1);
    assert_eq!(placed(&st, "e"), Ok("n".into()));
    unschedulable(&st, "whole", "Insufficient nvidia.com/gpu");
    // a leaves: 0.4 (d) and 0.6 (e) stay on their two devices rather than being packed
    // onto one afresh, so 0.7 fits neither device and no device is free whole.
    delete_pod(&mut st, "a");
    share_pod(&mut st, "f", "700");
    assert_eq!(pass(&mut st), 0);
    unschedulable(&st, "f", "no nvidia.com/gpu device with 700/1000 free");
    share_pod(&mut st, "g", "400");
    assert_eq!(pass(&mut st), 1, "0.4 still fits beside e's 0.6");
}

#[test]
fn hami_cores_take_a_share_of_each_device_and_bad_annotations_fit_nowhere() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "one", json!({"nvidia.com/gpu": "1"}));
    let hami = |gpus: &str, cores: &str| json!({"nvidia.com/gpu": gpus, "nvidia.com/gpucores": cores, "nvidia.com/gpumem": "8000"});
    add_pod(&mut st, "h1", json!({}), hami("1", "50"), None);
    add_pod(&mut st, "h2", json!({}), hami("1", "50"), None);
    add_pod(&mut st, "h3", json!({}), hami("1", "10"), None);
    add_pod(&mut st, "two", json!({}), hami("2", "10"), None);
    add_pod(
        &mut st,
        "bad",
        json!({"gpu-autoscaler.dev/gpu-share": "half"}),
        json!({}),
        None,
    );
    assert_eq!(pass(&mut st), 2, "two halves of the one device");
    unschedulable(&st, "h3", "no nvidia.com/gpu device with 100/1000 free");
    unschedulable(
        &st,
        "two",
        "fewer than 2 nvidia.com/gpu devices with 100/1000 free",
    );
    unschedulable(&st, "bad", "gpu-autoscaler.dev/gpu-share=\"half\"");
}

#[test]
fn a_share_pod_bound_by_someone_else_holds_a_device() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "one", json!({"nvidia.com/gpu": "1"}));
    add_pod(
        &mut st,
        "bound",
        json!({"gpu-autoscaler.dev/gpu-share": "700"}),
        json!({}),
        Some("one"),
    );
    share_pod(&mut st, "big", "500");
    share_pod(&mut st, "small", "300");
    assert_eq!(pass(&mut st), 1);
    unschedulable(&st, "big", "no nvidia.com/gpu device with 500/1000 free");
    assert_eq!(placed(&st, "small"), Ok("one".into()));
}

#[test]
fn requests_default_to_limits_and_add_init_and_overhead() {
    let pod = json!({"spec": {
        "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "500m"}}},
            {"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
        "overhead": {"cpu": "100m"}
    }});
    let r = pod_requests(&pod);
    assert_eq!(r["cpu"], 2100);
    assert_eq!(r["nvidia.com/gpu"], 1000);
    assert_eq!(r["memory"], 1_073_741_824_000);
    assert_eq!(r["pods"], 1000);
}

#[test]
fn tolerations_and_affinity() {
    let taint = json!({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"});
    assert!(tolerates(
        &[json!({"key": "nvidia.com/gpu", "operator": "Exists"})],
        &taint
    ));
    assert!(tolerates(&[json!({"operator": "Exists"})], &taint));
    assert!(!tolerates(
        &[json!({"key": "nvidia.com/gpu", "value": "false"})],
        &taint
    ));
    assert!(!tolerates(
        &[json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"})],
        &taint
    ));
    let node = json!({"metadata": {"name": "n1", "labels": {"gpu": "a100", "mem": "80"}}});
    let pod = |expr: Value| json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}});
    assert!(affinity_matches(
        &pod(json!({"key": "gpu", "operator": "In", "values": ["a100"]})),
        &node
    ));
    assert!(!affinity_matches(
        &pod(json!({"key": "gpu", "operator": "NotIn", "values": ["a100"]})),
        &node
    ));
    assert!(affinity_matches(
        &pod(json!({"key": "mem", "operator": "Gt", "values": ["40"]})),
        &node
    ));
    assert!(!affinity_matches(
        &pod(json!({"key": "x", "operator": "Exists"})),
        &node
    ));
}

#[test]
fn a_bound_volume_keeps_its_pod_to_the_nodes_its_affinity_names() {
    let mut st = State::new(1000, 16, false);
    for (name, zone) in [("a", "zone-a"), ("b", "zone-b")] {
        add_node(&mut st, name, json!({}));
        let def = st.def("", "nodes").unwrap();
        let mut n = (*st.get(&def, "", name).unwrap()).clone();
        n["metadata"]["labels"] = json!({"topology.kubernetes.io/zone": zone});
        st.update(
            &def,
            "",
            name,
            n,
            crate::store::Part::Main,
            &WriteOpts::default(),
        )
        .unwrap();
    }
    let pv = st.def("", "persistentvolumes").unwrap();
    st.create(&pv, "", json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-b"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}]}}}}),
        &WriteOpts::default()).unwrap();
    let sc = st.def("storage.k8s.io", "storageclasses").unwrap();
    st.create(
        &sc,
        "",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "late"}, "provisioner": "x",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["zone-b"]}]}]}),
        &WriteOpts::default(),
    )
    .unwrap();
    for (claim, volume, class) in [
        ("data", Some("pv-b"), None),
        ("fresh", None, None),
        ("first-use", None, Some("late")),
    ] {
        add_claim(&mut st, claim, class, volume);
    }
    for (name, claim) in [
        ("bound", "data"),
        ("unbound", "fresh"),
        ("lost", "gone"),
        ("late", "first-use"),
    ] {
        add_claim_pod(&mut st, name, claim);
    }
    pass(&mut st);
    // First fit by name would take node a; the volume lives in zone b.
    assert_eq!(placed(&st, "bound"), Ok("b".to_string()));
    assert_eq!(placed(&st, "unbound"), Ok("a".to_string()));
    assert_eq!(placed(&st, "late"), Ok("b".to_string()));
    unschedulable(&st, "lost", "persistentvolumeclaim \"gone\" not found");
    // With node b gone the bound pod's only node is in the wrong zone.
    add_pod(&mut st, "later", json!({}), json!({}), None);
    let def = st.def("", "nodes").unwrap();
    st.delete(&def, "", "b", &Value::Null, &WriteOpts::default())
        .unwrap();
    add_claim_pod(&mut st, "second", "data");
    pass(&mut st);
    unschedulable(&st, "second", "1 node(s) had volume node affinity conflict");
}

#[test]
fn a_csinode_count_caps_the_distinct_claims_of_its_driver_on_the_node() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "a", json!({}));
    add_csinode(
        &mut st,
        "a",
        &[("ebs.csi.aws.com", Some(2)), ("efs.csi.aws.com", None)],
    );
    add_class(&mut st, "ebs", "ebs.csi.aws.com");
    add_class(&mut st, "efs", "efs.csi.aws.com");
    for (claim, class) in [
        ("d0", "ebs"),
        ("d1", "ebs"),
        ("d2", "ebs"),
        ("shared", "efs"),
    ] {
        add_claim(&mut st, claim, Some(class), None);
    }
    for (name, claim) in [
        ("p0", "d0"),
        ("p1", "d1"),
        ("again", "d0"),
        ("p2", "d2"),
        ("files", "shared"),
    ] {
        add_claim_pod(&mut st, name, claim);
    }
    pass(&mut st);
    for name in ["p0", "p1", "again", "files"] {
        assert_eq!(placed(&st, name), Ok("a".to_string()), "{name}");
    }
    // A third distinct EBS claim passes the count; one already there, or another driver's
    // (published without a count), does not.
    unschedulable(&st, "p2", "1 node(s) exceed max volume count");
    // The next pass counts the claims of the pods bound before it.
    delete_pod(&mut st, "p1");
    pass(&mut st);
    assert_eq!(placed(&st, "p2"), Ok("a".to_string()));
}

#[test]
fn in_tree_volumes_count_against_the_csi_driver_they_migrated_to() {
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "a", json!({}));
    add_csinode(&mut st, "a", &[("ebs.csi.aws.com", Some(1))]);
    add(
        &mut st,
        "",
        "persistentvolumes",
        "",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-old"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "awsElasticBlockStore": {"volumeID": "vol-1"}}}),
    );
    add_class(&mut st, "gp2", "kubernetes.io/aws-ebs");
    add_claim(&mut st, "legacy", Some("gp2"), Some("pv-old"));
    add_claim(&mut st, "fresh", Some("gp2"), None);
    add_claim_pod(&mut st, "old", "legacy");
    add_claim_pod(&mut st, "new", "fresh");
    pass(&mut st);
    assert_eq!(placed(&st, "old"), Ok("a".to_string()));
    unschedulable(&st, "new", "1 node(s) exceed max volume count");
}

#[test]
fn a_claim_bound_to_a_volume_of_no_csi_driver_counts_for_none() {
    // An NFS volume is bound to a claim of an EBS class: neither kube-scheduler nor Karpenter
    // counts it against EBS, so the node's one EBS slot is still free for `ebs`.
    let mut st = State::new(1000, 16, false);
    add_node(&mut st, "a", json!({}));
    add_csinode(&mut st, "a", &[("ebs.csi.aws.com", Some(1))]);
    add(
        &mut st,
        "",
        "persistentvolumes",
        "",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-nfs"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                "nfs": {"server": "10.0.0.2", "path": "/share"}}}),
    );
    add_class(&mut st, "gp3", "ebs.csi.aws.com");
    add_claim(&mut st, "share", Some("gp3"), Some("pv-nfs"));
    add_claim(&mut st, "data", Some("gp3"), None);
    add_claim_pod(&mut st, "nfs", "share");
    add_claim_pod(&mut st, "ebs", "data");
    pass(&mut st);
    assert_eq!(placed(&st, "nfs"), Ok("a".to_string()));
    assert_eq!(placed(&st, "ebs"), Ok("a".to_string()));
}
