//! Requirements, spreads and disruption on AWS's zone ID label (`topology.k8s.aws/zone-id`),
//! which Karpenter's AWS provider treats as a well-known label: NodePool and pod requirements
//! on it narrow the zones a node may be launched in (`zone_ids`), and where no offering names
//! an ID the pod waits rather than get a node that only claims to be in that zone.

use std::collections::BTreeSet;

use autoscaler_core::builders::*;
use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, plan_disruption, validate};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels::ZONE_ID;
use autoscaler_core::model::{DisruptionPolicy, Snapshot};
use autoscaler_core::plan::{NewClaim, Plan};
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::requirements::Operator;

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const IDS: [&str; 3] = ["use1-az4", "use1-az6", "use1-az1"];

/// A 4-cpu type in the three zones, cheapest in us-east-1a, with the zones' IDs or without.
fn m5(with_ids: bool) -> InstanceType {
    let mut b = itype("m5.xlarge")
        .cpu("4")
        .mem("16Gi")
        .offer(
            ZONES[0],
            autoscaler_core::instance::CapacityType::OnDemand,
            0.19,
        )
        .offer(
            ZONES[1],
            autoscaler_core::instance::CapacityType::OnDemand,
            0.20,
        )
        .offer(
            ZONES[2],
            autoscaler_core::instance::CapacityType::OnDemand,
            0.21,
        );
    if with_ids {
        for (z, id) in ZONES.iter().zip(IDS) {
            b = b.zone_id(z, id);
        }
    }
    b.build()
}

fn snapshot(pods: Vec<PodBuilder>, pool: PoolBuilder) -> Snapshot {
    Snapshot {
        pending: pods.into_iter().map(|p| p.build()).collect(),
        pools: vec![pool.build()],
        ..Snapshot::default()
    }
}

fn zones(c: &NewClaim) -> BTreeSet<String> {
    c.instance_types
        .iter()
        .flat_map(|o| o.offerings.iter().map(|(z, _, _)| z.to_string()))
        .collect()
}

fn only(plan: &Plan) -> &NewClaim {
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    &plan.new_claims[0]
}

#[test]
fn a_nodepool_requirement_on_a_zone_id_launches_in_that_zone_only() {
    let pool = pool("default", vec![m5(true)]).require(ZONE_ID, Operator::In, &[IDS[1]]);
    let plan = plan_provisioning(&snapshot(vec![pod("p").cpu("1")], pool));
    let c = only(&plan);
    assert_eq!(zones(c), BTreeSet::from([ZONES[1].to_string()]));
    // The node is not labelled with an ID of the pool's choosing: the cloud labels it.
    assert!(!c.labels.contains_key(ZONE_ID), "{:?}", c.labels);
}

#[test]
fn a_pod_selecting_a_zone_id_gets_a_node_in_its_zone() {
    let pods = vec![
        pod("in").cpu("1").select(ZONE_ID, IDS[2]),
        pod("not")
            .cpu("1")
            .require(ZONE_ID, Operator::NotIn, &[IDS[0]]),
    ];
    let plan = plan_provisioning(&snapshot(pods, pool("default", vec![m5(true)])));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    // Both fit one node in us-east-1c, the only zone both allow that the first asks for.
    let c = only(&plan);
    assert_eq!(zones(c), BTreeSet::from([ZONES[2].to_string()]));
}

#[test]
fn existing_room_counts_only_in_the_zone_the_id_names() {
    let t = m5(true);
    let mut s = snapshot(
        vec![pod("p").cpu("1").select(ZONE_ID, IDS[1])],
        pool("default", vec![t.clone()]),
    );
    s.nodes = vec![
        node("in-a", &t, ZONES[0]).pool("default").build(),
        node("in-b", &t, ZONES[1]).pool("default").build(),
    ];
    let plan = plan_provisioning(&s);
    assert_eq!(plan.render().trim(), "existing default/p -> in-b");
}

#[test]
fn a_zone_id_no_offering_names_leaves_the_pod_pending() {
    // Without IDs on the offerings, nothing says which zone use1-az6 is: the pod waits, where
    // reading the NodePool's requirement as a label the NodePool gives its nodes would launch
    // a node in any zone labelled with the ID.
    let pool = pool("default", vec![m5(false)]).require(ZONE_ID, Operator::In, &[IDS[1]]);
    let plan = plan_provisioning(&snapshot(vec![pod("p").cpu("1")], pool));
    assert!(plan.new_claims.is_empty(), "{}", plan.render());
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
}

#[test]
fn a_spread_over_zone_ids_balances_the_zones() {
    let pods: Vec<PodBuilder> = (0..6)
        .map(|i| {
            pod(&format!("w{i}"))
                .cpu("3")
                .label("app", "web")
                .spread(ZONE_ID, 1, "web")
        })
        .collect();
    let plan = plan_provisioning(&snapshot(pods, pool("default", vec![m5(true)])));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    let mut per_zone = std::collections::BTreeMap::<String, usize>::new();
    for c in &plan.new_claims {
        let z = zones(c);
        assert_eq!(
            z.len(),
            1,
            "each claim pinned to one zone: {}",
            plan.render()
        );
        *per_zone.entry(z.into_iter().next().unwrap()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
}

#[test]
fn a_replacement_stays_in_the_zone_the_pods_id_names() {
    // A 16-cpu node in us-east-1b runs one 1-cpu pod that requires us-east-1b's ID: the
    // cheaper replacement must be launched in us-east-1b too (read as a label no type has,
    // the requirement would leave no replacement at all).
    let small = m5(true);
    let big = {
        let mut b = itype("m5.4xlarge").cpu("16").mem("64Gi");
        for (z, id) in ZONES.iter().zip(IDS) {
            b = b
                .offer(z, autoscaler_core::instance::CapacityType::OnDemand, 0.77)
                .zone_id(z, id);
        }
        b.build()
    };
    let s = Snapshot {
        nodes: vec![
            node("b", &big, ZONES[1])
                .pool("default")
                .label(ZONE_ID, IDS[1])
                .with_pod(
                    pod("p")
                        .cpu("1")
                        .owner(Some("ReplicaSet"))
                        .select(ZONE_ID, IDS[1]),
                )
                .build(),
        ],
        pools: vec![
            pool("default", vec![small, big])
                .disruption(DisruptionPolicy {
                    unneeded_s: 0,
                    budgets: vec![],
                    ..DisruptionPolicy::default()
                })
                .build(),
        ],
        ..Snapshot::default()
    };
    let plan = plan_disruption(
        &s,
        &DisruptionState::default(),
        1_000_000,
        &DisruptionConfig::default(),
    );
    let c = plan
        .commands
        .iter()
        .find(|c| c.nodes == ["b"])
        .unwrap_or_else(|| panic!("b is replaced: {}", plan.render()));
    let r = c.replacement.as_ref().expect("a replacement");
    assert_eq!(zones(r), BTreeSet::from([ZONES[1].to_string()]));
    // Checked again after the validation delay on the cluster as it is, the command holds:
    // validation reads the zone ID as the decision did.
    let config = DisruptionConfig::default();
    let mut now_snap = s.clone();
    let later = 1_000_000 + config.validation_delay_s;
    assert_eq!(validate(c, &mut now_snap, later, &config), Ok(()));
}

#[test]
fn min_values_on_zone_ids_count_zones() {
    // A NodePool asking for two distinct zone IDs gets a claim that may land in two zones.
    let pool = pool("default", vec![m5(true)])
        .require(ZONE_ID, Operator::In, &IDS[..2])
        .min_values(ZONE_ID, 2);
    let plan = plan_provisioning(&snapshot(vec![pod("p").cpu("1")], pool));
    let c = only(&plan);
    assert_eq!(
        zones(c),
        BTreeSet::from([ZONES[0].to_string(), ZONES[1].to_string()])
    );
}
