//! Tests of the explanations: each pool and type refused for the rule that refuses it, the
//! considerations taken at placement time (limits used by earlier pods count), hints, node
//! verdicts and pool standing.

use expect_test::expect;

use super::*;
use crate::builders::{itype, node, pod, pool};
use crate::instance::CapacityType;
use crate::labels;
use crate::model::Pod;
use crate::requirements::Operator;

fn t4() -> crate::InstanceType {
    itype("g4dn.xlarge")
        .cpu("4")
        .mem("16Gi")
        .gpus(1, "T4", 16)
        .on_demand(&["z1"], 0.5)
        .build()
}

fn h100() -> crate::InstanceType {
    itype("p5.48xlarge")
        .cpu("192")
        .mem("2Ti")
        .gpus(8, "H100", 80)
        .on_demand(&["z1"], 98.0)
        .build()
}

fn cpu() -> crate::InstanceType {
    itype("m5.xlarge")
        .cpu("4")
        .mem("16Gi")
        .on_demand(&["z1"], 0.2)
        .offer("z2", CapacityType::Spot, 0.1)
        .unavailable_in("z2")
        .build()
}

fn snapshot(pending: Vec<Pod>) -> Snapshot {
    Snapshot {
        pending,
        pools: vec![
            pool("general", vec![cpu(), t4()]).build(),
            pool("gpu", vec![t4(), h100(), cpu()])
                .taint("nvidia.com/gpu", "")
                .require(labels::INSTANCE_TYPE, Operator::In, &["g4dn.xlarge"])
                .limit("nvidia.com/gpu", "2")
                .weight(10)
                .build(),
        ],
        ..Default::default()
    }
}

#[test]
fn a_gpu_model_no_pool_offers_names_each_pool_type_and_the_spelling_meant() {
    // The pod selects the catalog's spelling; labels hold the lower-case one.
    let p = pod("train")
        .gpus(1)
        .select(labels::GPU_NAME, "H100")
        .build();
    let snap = snapshot(vec![p.clone()]);
    let e = explain_pod(&snap, &p.key).expect("pending");
    assert!(matches!(e.outcome, Outcome::Unschedulable { .. }), "{e:?}");
    expect![[r#"
        Pod default/train
          pending; no node can be launched for it: no instance type in NodePool gpu matches the pod's node selector and affinity; no instance type in NodePool general matches the pod's node selector and affinity; no instance type has gpu-autoscaler.dev/instance-gpu-name="H100" (did you mean "h100"? GPU names in labels are lower case)
        NodePools considered (highest weight first):
          gpu (weight 10)
            g4dn.xlarge: refused (Requirements): the pod requires gpu-autoscaler.dev/instance-gpu-name In [H100]; the type has gpu-autoscaler.dev/instance-gpu-name=t4
            p5.48xlarge, m5.xlarge: left out by the NodePool (Requirements): the NodePool requires node.kubernetes.io/instance-type In [g4dn.xlarge]
          general (weight 0)
            m5.xlarge: refused (Requirements): the pod requires gpu-autoscaler.dev/instance-gpu-name In [H100]; the type has no gpu-autoscaler.dev/instance-gpu-name label
            g4dn.xlarge: refused (Requirements): the pod requires gpu-autoscaler.dev/instance-gpu-name In [H100]; the type has gpu-autoscaler.dev/instance-gpu-name=t4
        Hint: no instance type has gpu-autoscaler.dev/instance-gpu-name="H100" (did you mean "h100"? GPU names in labels are lower case)
    "#]]
    .assert_eq(&e.render());
}

#[test]
fn a_pod_riding_in_a_gpu_nodes_spare_room_is_told_it_shares_the_claim() {
    // "infer" is held to the untainted pool, gets a g4dn.xlarge there, and "web" rides in the
    // cores it leaves: the explanation lists the GPU type as never launched for "web", and
    // says the claim is shared.
    let infer = pod("infer")
        .cpu("1")
        .gpus(1)
        .select(labels::NODEPOOL, "general")
        .build();
    let web = pod("web").cpu("1").build();
    let snap = snapshot(vec![infer, web.clone()]);
    let e = explain_pod(&snap, &web.key).unwrap();
    expect![[r#"
        Pod default/web
          pending; gets a new NodeClaim of NodePool general at the next planning round (instance types g4dn.xlarge; from 0.500/h; shared with 1 other pending pod)
        NodePools considered (highest weight first):
          gpu (weight 10): refused (Taint): the pod does not tolerate the NodePool's taint nvidia.com/gpu:NoSchedule
          general (weight 0)
            m5.xlarge: fits, from 0.200/h
            g4dn.xlarge: refused (GpuLastResort): a GPU type, never launched for a pod that needs no GPU while a GPU-less type fits (it may take room a GPU node planned for other pods leaves)
    "#]]
    .assert_eq(&e.render());
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["outcome"]["kind"], "newClaim");
    assert_eq!(json["outcome"]["otherPods"], 1);
}

#[test]
fn taints_resources_and_gpu_last_resort_each_say_so() {
    let small = pod("web").cpu("2").build();
    let big = pod("huge").cpu("64").build();
    let snap = snapshot(vec![small.clone(), big.clone()]);
    let e = explain_pod(&snap, &small.key).unwrap();
    expect![[r#"
        Pod default/web
          pending; gets a new NodeClaim of NodePool general at the next planning round (instance types m5.xlarge; from 0.200/h)
        NodePools considered (highest weight first):
          gpu (weight 10): refused (Taint): the pod does not tolerate the NodePool's taint nvidia.com/gpu:NoSchedule
          general (weight 0)
            m5.xlarge: fits, from 0.200/h
            g4dn.xlarge: refused (GpuLastResort): a GPU type, never launched for a pod that needs no GPU while a GPU-less type fits (it may take room a GPU node planned for other pods leaves)
    "#]]
    .assert_eq(&e.render());
    let e = explain_pod(&snap, &big.key).unwrap();
    let general = &e.pools[1];
    let r = general.instance_types[0].refused.as_ref().unwrap();
    assert_eq!(r.kind, RefusalKind::Resources);
    assert_eq!(
        r.message,
        "the pod requests 64 cpu; a node of this type has 4 for pods (after system reserve and \
         DaemonSets)"
    );
}

#[test]
fn a_limit_used_by_pods_placed_earlier_in_the_same_plan_is_the_reason() {
    // Three 1-GPU pods, room for two under the limit: the third finds the limit reached.
    let pods: Vec<Pod> = (1..=3)
        .map(|i| pod(&format!("g{i}")).cpu("3").gpus(1).build())
        .collect();
    let mut snap = snapshot(pods.clone());
    snap.pools.remove(0);
    let plan = crate::plan_provisioning(&snap);
    let stuck = &plan.unschedulable[0].pod;
    let e = explain_pod(&snap, stuck).unwrap();
    let t = &e.pools[0].instance_types[0];
    assert_eq!(t.instance_type, "g4dn.xlarge");
    let r = t.refused.as_ref().expect("refused");
    assert_eq!(
        (r.kind, r.message.as_str()),
        (
            RefusalKind::Limits,
            "NodePool gpu limit nvidia.com/gpu=2 reached"
        )
    );
    let first = &plan.new_claims[0].pods[0];
    let e = explain_pod(&snap, first).unwrap();
    assert!(e.pools[0].instance_types[0].refused.is_none(), "{e:?}");
    assert!(matches!(e.outcome, Outcome::NewClaim { .. }));
}

#[test]
fn pool_standing_has_limits_budgets_exclusions_and_verdicts() {
    let mut snap = snapshot(vec![]);
    let n = node("gpu-a", &t4(), "z1")
        .pool("gpu")
        .with_pod(pod("a").cpu("1").gpus(1).build())
        .build();
    let m = node("gpu-b", &t4(), "z1").pool("gpu").build();
    snap.nodes = vec![n, m];
    // gpu-b has been unneeded for an hour.
    let mut state = DisruptionState::default();
    state.unneeded_since.insert("gpu-b".into(), -3600);
    let plan = plan_disruption(&snap, &state, 0, &Default::default());
    let e = explain_pool(&snap, "gpu", &plan.verdicts, 0).expect("a pool");
    expect![[r#"
        NodePool gpu (weight 10)
          nodes: 2 (existing and in flight), minNodes 0
          limits:
            nvidia.com/gpu: 2 of 2 (reached)
          usage: cpu=8, memory=32Gi, nvidia.com/gpu=2, pods=220
          disruption budgets:
            10% (all reasons): allows 1 node(s) at once, 0 being deleted
          instance types (0 of 3 can launch one more node):
            g4dn.xlarge: refused (Limits): NodePool gpu limit nvidia.com/gpu=2 reached
            p5.48xlarge, m5.xlarge: left out by the NodePool (Requirements): the NodePool requires node.kubernetes.io/instance-type In [g4dn.xlarge]
          nodes:
            gpu-a: kept (AboveThreshold): GPU utilization 1.00 above threshold 0.50
            gpu-b: chosen (Empty): empty
    "#]]
    .assert_eq(&e.render());
    let v = explain_node(&snap, &state, 0, &Default::default(), "gpu-b").unwrap();
    assert!(v.verdict.disrupted);
    assert_eq!(
        v.command.as_ref().map(|c| c.nodes.clone()),
        Some(vec!["gpu-b".to_string()])
    );
    assert!(
        explain_node(
            &snap,
            &DisruptionState::default(),
            0,
            &Default::default(),
            "nope"
        )
        .is_none()
    );
    assert!(explain_pool(&snap, "nope", &[], 0).is_none());
}

/// Scheduled budgets show their window and whether it is open now (the epoch, a Thursday
/// midnight); the closed one does not lower what the pool allows.
#[test]
fn pool_standing_shows_budget_windows() {
    use crate::cron::Cron;
    use crate::model::{Budget, BudgetSchedule, BudgetValue};
    let mut snap = snapshot(vec![]);
    snap.nodes = vec![node("gpu-a", &t4(), "z1").pool("gpu").build()];
    let window = |cron: &str, duration_s| {
        Some(BudgetSchedule {
            cron: Cron::parse(cron).unwrap(),
            duration_s,
        })
    };
    let pi = snap.pools.iter().position(|p| p.name == "gpu").unwrap();
    snap.pools[pi].disruption.budgets = vec![
        Budget {
            nodes: BudgetValue::Count(0),
            reasons: vec![DisruptionReason::Drifted],
            schedule: window("@daily", 5400),
        },
        Budget {
            nodes: BudgetValue::Count(0),
            reasons: vec![],
            schedule: window("0 9 * * mon-fri", 8 * 3600),
        },
    ];
    let e = explain_pool(&snap, "gpu", &[], 0).expect("a pool");
    let text = e.render();
    let budgets: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("disruption budgets:"))
        .skip(1)
        .take(2)
        .collect();
    expect![[r#"
        [
            "    0 (Drifted) from \"@daily\" (UTC) for 1h30m, active now: allows 0 node(s) at once, 0 being deleted",
            "    0 (all reasons) from \"0 9 * * mon-fri\" (UTC) for 8h, inactive now: limits nothing, 0 being deleted",
        ]
    "#]]
    .assert_debug_eq(&budgets);
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["budgets"][0]["schedule"], "@daily");
    assert_eq!(json["budgets"][0]["durationS"], 5400);
    assert_eq!(json["budgets"][0]["active"], true);
    assert_eq!(json["budgets"][1]["active"], false);
}

#[test]
fn offerings_and_unknown_pods_are_explained_or_refused() {
    let p = pod("spot")
        .cpu("1")
        .require(labels::CAPACITY_TYPE, Operator::In, &["spot"])
        .build();
    let snap = snapshot(vec![p.clone()]);
    let e = explain_pod(&snap, &p.key).unwrap();
    let r = e.pools[1].instance_types[0].refused.as_ref().unwrap();
    assert_eq!(r.kind, RefusalKind::Offerings, "{r:?}");
    assert_eq!(
        r.message,
        "no offering the pod allows (karpenter.sh/capacity-type In [spot]); offered: z1/on-demand"
    );
    let other = crate::PodKey {
        namespace: "default".into(),
        name: "absent".into(),
    };
    assert!(explain_pod(&snap, &other).is_none());
    // The JSON shape: camelCase, the outcome tagged by kind.
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["outcome"]["kind"], "unschedulable");
    assert_eq!(
        json["pools"][1]["instanceTypes"][0]["refused"]["kind"],
        "offerings"
    );
}

#[test]
fn a_pod_placed_against_its_preference_says_which_preference_it_gave_up() {
    // Two replicas preferring hosts apart, in a NodePool of at most one node: the second
    // gives the preference up and shares the first one's node; its explanation says so.
    let web = |name: &str| {
        pod(name)
            .cpu("1")
            .label("app", "web")
            .prefer_anti_affinity(5, labels::HOSTNAME, "web")
            .build()
    };
    let snap = Snapshot {
        pending: vec![web("web-a"), web("web-b")],
        pools: vec![pool("general", vec![cpu()]).limit_nodes(1).build()],
        ..Default::default()
    };
    let given_up: Vec<usize> = snap
        .pending
        .iter()
        .map(|p| explain_pod(&snap, &p.key).unwrap().given_up.len())
        .collect();
    assert_eq!(given_up, vec![0, 1]);
    let e = explain_pod(&snap, &snap.pending[1].key).unwrap();
    expect![[r#"
        Pod default/web-b
          pending; gets a new NodeClaim of NodePool general at the next planning round (instance types m5.xlarge; from 0.200/h; shared with 1 other pending pod)
          gave up its preferred pod anti-affinity (weight 5) over kubernetes.io/hostname with pods app In [web]
        NodePools considered (highest weight first):
          general (weight 0)
            m5.xlarge: refused (Limits): NodePool general limit nodes=1 reached
    "#]]
    .assert_eq(&e.render());
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["givenUp"].as_array().map(Vec::len), Some(1), "{json}");
}
