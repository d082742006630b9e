//! Lifecycle steps, bookings and holds of ProvisioningRequests, on literal objects.

use super::*;
use autoscaler_core::builders::{itype, node, pod};
use serde_json::json;

const T0: i64 = 1_700_000_000;

fn ts(s: i64) -> String {
    jiff::Timestamp::from_second(s).unwrap().to_string()
}

/// A request with the given conditions (`(type, status, at)`) and details.
fn pr(class: &str, conds: &[(&str, &str, i64)], details: serde_json::Value) -> ProvisioningRequest {
    let conditions: Vec<_> = conds
        .iter()
        .map(|(t, s, at)| {
            json!({"type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": ts(*at)})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": "train", "namespace": "ml", "uid": "0f0f", "generation": 1},
        "spec": {"provisioningClassName": class, "parameters": {"BookingDurationSeconds": "60"},
                 "podSets": [{"podTemplateRef": {"name": "ppt-train-main"}, "count": 2}]},
        "status": {"conditions": conditions, "provisioningClassDetails": details}
    }))
    .unwrap()
}

fn facts(now: i64, targets: &[(Target, TargetStatus)], consumed: u32) -> Facts {
    Facts {
        now,
        created: T0,
        targets: targets.iter().cloned().collect(),
        consumed,
    }
}

fn settings() -> Settings {
    Settings::default()
}

#[test]
fn booking_renders_and_parses_and_rejects_bad_entries() {
    let b = Booking::parse("node/a=2, claim/gpu-x=1").unwrap();
    assert_eq!(b.total(), 3);
    assert_eq!(b.render(), "node/a=2,claim/gpu-x=1");
    assert_eq!(b.claims().collect::<Vec<_>>(), ["gpu-x"]);
    for bad in ["node/a", "node/a=x", "pod/a=1", "node/=1"] {
        assert!(Booking::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn unknown_classes_are_left_alone() {
    let p = pr("queued-provisioning.gke.io", &[], json!({}));
    assert_eq!(Class::of(&p), None);
    assert_eq!(step(&p, &facts(T0, &[], 0), &settings()), Step::Wait);
}

#[test]
fn new_request_is_accepted_then_attempted_until_its_deadline() {
    let p = pr(CHECK_CAPACITY, &[], json!({}));
    assert_eq!(step(&p, &facts(T0, &[], 0), &settings()), Step::Accept);
    let p = pr(
        CHECK_CAPACITY,
        &[("Accepted", "True", T0), ("Provisioned", "False", T0)],
        json!({}),
    );
    assert_eq!(state(&p), State::Waiting);
    assert_eq!(
        step(&p, &facts(T0 + 10, &[], 0), &settings()),
        Step::Attempt
    );
    let late = T0 + Settings::default().deadline_s;
    assert!(matches!(
        step(&p, &facts(late, &[], 0), &settings()),
        Step::Fail {
            reason: reasons::EXPIRED,
            ..
        }
    ));
}

#[test]
fn launching_waits_for_every_claim_and_rolls_back_on_any_failure() {
    let details = json!({BOOKING_DETAIL: "claim/a=1,claim/b=1"});
    let p = pr(
        BEST_EFFORT_ATOMIC,
        &[("Accepted", "True", T0), ("Provisioned", "False", T0)],
        details,
    );
    let a = Target::Claim("a".into());
    let b = Target::Claim("b".into());
    let up = TargetStatus::Alive { launched: true };
    let pending = TargetStatus::Alive { launched: false };
    assert!(matches!(state(&p), State::Launching(_)));
    let f = facts(T0, &[(a.clone(), up.clone()), (b.clone(), pending)], 0);
    assert_eq!(step(&p, &f, &settings()), Step::Wait);
    let f = facts(T0, &[(a.clone(), up.clone()), (b.clone(), up.clone())], 0);
    assert_eq!(step(&p, &f, &settings()), Step::Provisioned);
    let f = facts(
        T0,
        &[
            (a.clone(), up.clone()),
            (b.clone(), TargetStatus::Failed("ICE".into())),
        ],
        0,
    );
    assert!(
        matches!(step(&p, &f, &settings()), Step::Rollback { message } if message.contains("NodeClaim b failed to launch: ICE"))
    );
    let f = facts(T0, &[(a, up), (b, TargetStatus::Gone)], 0);
    assert!(matches!(step(&p, &f, &settings()), Step::Rollback { .. }));
}

#[test]
fn booked_request_is_revoked_consumed_or_expired() {
    let p = pr(
        BEST_EFFORT_ATOMIC,
        &[("Accepted", "True", T0), ("Provisioned", "True", T0 + 5)],
        json!({BOOKING_DETAIL: "node/n1=2"}),
    );
    let n1 = Target::Node("n1".into());
    let up = TargetStatus::Alive { launched: true };
    assert!(matches!(state(&p), State::Booked { since, .. } if since == T0 + 5));
    // Held: one pod of two arrived, 30 s of the 60 s booking passed.
    assert_eq!(
        step(
            &p,
            &facts(T0 + 35, &[(n1.clone(), up.clone())], 1),
            &settings()
        ),
        Step::Wait
    );
    assert!(matches!(
        step(
            &p,
            &facts(T0 + 35, &[(n1.clone(), up.clone())], 2),
            &settings()
        ),
        Step::Expire {
            reason: reasons::CONSUMED,
            ..
        }
    ));
    assert!(matches!(
        step(&p, &facts(T0 + 65, &[(n1.clone(), up)], 1), &settings()),
        Step::Expire {
            reason: reasons::TIME_EXPIRED,
            ..
        }
    ));
    assert!(matches!(
        step(&p, &facts(T0 + 35, &[(n1, TargetStatus::Gone)], 0), &settings()),
        Step::Revoke { message } if message.contains("node n1")
    ));
}

#[test]
fn terminal_conditions_end_the_lifecycle() {
    for t in ["Failed", "BookingExpired", "CapacityRevoked"] {
        let p = pr(
            CHECK_CAPACITY,
            &[
                ("Accepted", "True", T0),
                ("Provisioned", "True", T0),
                (t, "True", T0),
            ],
            json!({}),
        );
        assert_eq!(state(&p), State::Done, "{t}");
        assert_eq!(step(&p, &facts(T0, &[], 0), &settings()), Step::Wait);
    }
}

#[test]
fn pods_come_from_the_templates_in_the_request_group() {
    let p = pr(CHECK_CAPACITY, &[], json!({}));
    let t: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": "ppt-train-main", "namespace": "ml"},
        "template": {"metadata": {"labels": {"app": "train"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}
    }))
    .unwrap();
    let mut templates = BTreeMap::new();
    assert!(
        pods(&p, &templates)
            .unwrap_err()
            .contains("PodTemplate ml/ppt-train-main (spec.podSets[0]) not found")
    );
    templates.insert(("ml".to_string(), "ppt-train-main".to_string()), &t);
    let made = pods(&p, &templates).unwrap();
    assert_eq!(made.len(), 2);
    assert_eq!(made[1].key.name, "train-0-1");
    assert_eq!(made[0].requests.get("nvidia.com/gpu"), 2);
    assert_eq!(made[0].group.as_deref(), Some("provreq:ml/train"));
    let ph = phantoms(made, 1);
    assert_eq!(ph.len(), 1);
    assert_eq!(ph[0].key.name, "train-0-0.booked");
    assert_eq!(ph[0].group, None);
}

#[test]
fn hold_puts_phantoms_on_booked_nodes_and_claims() {
    let t = itype("g4dn.12xlarge")
        .cpu("48")
        .mem("192Gi")
        .gpus(4, "T4", 16)
        .on_demand(&["us-east-1a"], 3.9)
        .build();
    let mut snap = Snapshot {
        nodes: vec![node("n1", &t, "us-east-1a").build()],
        in_flight: vec![autoscaler_core::model::InFlightClaim {
            name: "c1".into(),
            pool: "gpu".into(),
            instance_types: vec!["g4dn.12xlarge".into()],
            requirements: Default::default(),
            pods: vec![],
            created_at: 0,
        }],
        ..Snapshot::default()
    };
    let booking = Booking::parse("node/n1=2,claim/c1=1,node/gone=1").unwrap();
    let ph: Vec<_> = (0..4)
        .map(|i| pod(&format!("p{i}")).gpus(1).build())
        .collect();
    hold(&mut snap, &booking, ph);
    // Targets are walked in order: claim/c1, node/gone, node/n1.
    assert_eq!(snap.in_flight[0].pods.len(), 1);
    assert_eq!(snap.nodes[0].pods.len(), 2);
    assert!(snap.booked_nodes.contains("n1"));
    assert_eq!(snap.booked_nodes.len(), 1);
}

#[test]
fn consuming_pods_name_their_request_under_either_annotation() {
    for key in [CONSUME_ANNOTATION, CONSUME_ANNOTATION_CA] {
        let p = pod("w").ns("ml").annotate(key, "train").build();
        assert_eq!(consumed_request(&p).as_deref(), Some("ml/train"));
    }
    assert_eq!(consumed_request(&pod("w").build()), None);
}
