//! Nominations (`PlanOptions::nominated`): a pending pod an earlier plan put on an in-flight
//! claim keeps that claim's room when a newer, larger pod arrives, instead of being moved to a
//! new claim of its own (which the controller's launch guard counts as its second launch).

use std::collections::BTreeMap;

use autoscaler_core::builders::*;
use autoscaler_core::labels;
use autoscaler_core::model::{InFlightClaim, PodKey, Snapshot};
use autoscaler_core::provision::{PlanOptions, plan_with};
use autoscaler_core::requirements::{Operator, Requirements};
use expect_test::{Expect, expect};

mod support;
use support::{cpu_types, with_groups};

/// Pod `old` (2 vCPU) is waiting for in-flight claim `c-1` (an m5.xlarge, room for one of
/// the two pods); pod `new` (3 vCPU) has just arrived.
fn snapshot() -> Snapshot {
    let mut snap = with_groups(Snapshot {
        pending: vec![
            pod("old").cpu("2").mem("1Gi").build(),
            pod("new").cpu("3").mem("1Gi").build(),
        ],
        pools: vec![pool("default", cpu_types()).build()],
        ..Snapshot::default()
    });
    snap.in_flight.push(InFlightClaim {
        name: "c-1".into(),
        pool: "default".into(),
        instance_types: vec!["m5.xlarge".into()],
        requirements: Requirements::new().with(labels::ZONE, Operator::In, &["us-east-1a"]),
        pods: vec![],
        created_at: 0,
    });
    snap
}

fn key(name: &str) -> PodKey {
    PodKey {
        namespace: "default".into(),
        name: name.into(),
    }
}

fn check(nominated: &[(&str, &str)], expected: Expect) {
    let options = PlanOptions {
        nominated: nominated
            .iter()
            .map(|(p, c)| (key(p), c.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ..PlanOptions::default()
    };
    let snap = snapshot();
    let plan = plan_with(&snap, &options);
    expected.assert_eq(&plan.render());
    assert_eq!(plan, plan_with(&snap, &options), "deterministic");
}

#[test]
fn without_a_nomination_the_larger_pod_takes_the_in_flight_room() {
    check(
        &[],
        expect![[r#"
            in-flight default/new -> c-1
            claim default-1 pool=default price=0.096 types=[m5.large,m5.xlarge,m5.2xlarge,m5.4xlarge] pods=[old]
        "#]],
    );
}

#[test]
fn a_nominated_pod_keeps_its_claim_and_the_newer_pod_gets_the_new_one() {
    check(
        &[("old", "c-1")],
        expect![[r#"
            in-flight default/old -> c-1
            claim default-1 pool=default price=0.192 types=[m5.xlarge,m5.2xlarge,m5.4xlarge] pods=[new]
        "#]],
    );
}

#[test]
fn a_nomination_to_a_claim_that_is_not_in_flight_is_ignored() {
    check(
        &[("old", "gone-7")],
        expect![[r#"
            in-flight default/new -> c-1
            claim default-1 pool=default price=0.096 types=[m5.large,m5.xlarge,m5.2xlarge,m5.4xlarge] pods=[old]
        "#]],
    );
}

#[test]
fn a_nominated_pod_its_claim_no_longer_takes_is_planned_like_any_other() {
    // Both pods nominated to the one claim (a plan on an older snapshot): the first in size
    // order keeps it, the other gets a new claim.
    check(
        &[("old", "c-1"), ("new", "c-1")],
        expect![[r#"
            in-flight default/new -> c-1
            claim default-1 pool=default price=0.096 types=[m5.large,m5.xlarge,m5.2xlarge,m5.4xlarge] pods=[old]
        "#]],
    );
}
