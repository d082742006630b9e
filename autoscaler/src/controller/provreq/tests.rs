//! Lifecycle steps, bookings and holds of ProvisioningRequests, on literal objects.

use super::*;
use autoscaler_core::builders::{itype, node, pod};
use autoscaler_core::model::Snapshot;
use k8s_openapi::api::core::v1::PodTemplate;
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
    // The deadline itself still counts (the Cluster Autoscaler expires strictly after it).
    let deadline = T0 + Settings::default().deadline_s;
    assert_eq!(
        step(&p, &facts(deadline, &[], 0), &settings()),
        Step::Attempt
    );
    assert!(matches!(
        step(&p, &facts(deadline + 1, &[], 0), &settings()),
        Step::Fail {
            reason: reasons::EXPIRED,
            ..
        }
    ));
    // A request first seen after its deadline fails at once, without being accepted.
    let stale = pr(CHECK_CAPACITY, &[], json!({}));
    assert!(matches!(
        step(&stale, &facts(deadline + 1, &[], 0), &settings()),
        Step::Fail {
            reason: reasons::EXPIRED,
            ..
        }
    ));
}

#[test]
fn a_request_another_writer_provisioned_is_booked_not_accepted_again() {
    // Provisioned=True and no Accepted (the Cluster Autoscaler's writes before a migration):
    // booked from Provisioned's time, and expired once the booking time has run.
    for class in [CHECK_CAPACITY, BEST_EFFORT_ATOMIC] {
        let p = pr(class, &[("Provisioned", "True", T0)], json!({}));
        assert_eq!(
            state(&p),
            State::Booked {
                booking: Booking::default(),
                since: T0,
                clock: None
            },
            "{class}"
        );
        assert_eq!(step(&p, &facts(T0 + 30, &[], 0), &settings()), Step::Wait);
        assert!(matches!(
            step(&p, &facts(T0 + 60, &[], 0), &settings()),
            Step::Expire {
                reason: reasons::TIME_EXPIRED,
                ..
            }
        ));
    }
}

#[test]
fn a_request_for_another_autoscaler_instance_is_left_alone() {
    let mut p = pr(CHECK_CAPACITY, &[], json!({}));
    p.spec
        .parameters
        .insert(PARAM_PROCESSOR_INSTANCE.into(), "instance2".into());
    assert_eq!(Class::of(&p), None);
    assert_eq!(step(&p, &facts(T0, &[], 0), &settings()), Step::Wait);
    // An empty name addresses no instance in particular.
    p.spec
        .parameters
        .insert(PARAM_PROCESSOR_INSTANCE.into(), String::new());
    assert_eq!(step(&p, &facts(T0, &[], 0), &settings()), Step::Accept);
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
    let up = TargetStatus::Alive {
        launched: true,
        initialized: false,
    };
    let pending = TargetStatus::Alive {
        launched: false,
        initialized: false,
    };
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

const UP: TargetStatus = TargetStatus::Alive {
    launched: true,
    initialized: true,
};

#[test]
fn booked_request_is_lost_revoked_consumed_or_expired() {
    let p = pr(
        BEST_EFFORT_ATOMIC,
        &[("Accepted", "True", T0), ("Provisioned", "True", T0 + 5)],
        json!({BOOKING_DETAIL: "node/n1=2", CLOCK_DETAIL: (T0 + 5).to_string()}),
    );
    let n1 = Target::Node("n1".into());
    assert!(
        matches!(state(&p), State::Booked { since, clock: Some(c), .. } if since == T0 + 5 && c == T0 + 5)
    );
    // Held: one pod of two arrived, 30 s of the 60 s booking passed.
    assert_eq!(
        step(&p, &facts(T0 + 35, &[(n1.clone(), UP)], 1), &settings()),
        Step::Wait
    );
    assert!(matches!(
        step(&p, &facts(T0 + 35, &[(n1.clone(), UP)], 2), &settings()),
        Step::Expire {
            reason: reasons::CONSUMED,
            ..
        }
    ));
    assert!(matches!(
        step(&p, &facts(T0 + 65, &[(n1.clone(), UP)], 1), &settings()),
        Step::Expire {
            reason: reasons::TIME_EXPIRED,
            ..
        }
    ));
    // Lost before any pod started: a failed attempt (Kueue retries), not a revocation.
    assert!(matches!(
        step(&p, &facts(T0 + 35, &[(n1.clone(), TargetStatus::Gone)], 0), &settings()),
        Step::Lost { message } if message.contains("node n1") && message.contains("before any pod")
    ));
    assert!(matches!(
        step(&p, &facts(T0 + 35, &[(n1, TargetStatus::Gone)], 1), &settings()),
        Step::Revoke { message } if message.contains("node n1") && message.contains("1 pod(s)")
    ));
}

#[test]
fn booking_time_starts_once_every_booked_node_is_initialized() {
    let p = pr(
        BEST_EFFORT_ATOMIC,
        &[("Accepted", "True", T0), ("Provisioned", "True", T0 + 5)],
        json!({BOOKING_DETAIL: "claim/c1=1,claim/c2=1"}),
    );
    let c1 = Target::Claim("c1".into());
    let c2 = Target::Claim("c2".into());
    let booting = TargetStatus::Alive {
        launched: true,
        initialized: false,
    };
    // Long past the 60 s booking counted from Provisioned, but c2 still boots: no expiry.
    let f = facts(T0 + 600, &[(c1.clone(), UP), (c2.clone(), booting)], 0);
    assert_eq!(step(&p, &f, &settings()), Step::Wait);
    let f = facts(T0 + 600, &[(c1, UP), (c2, UP)], 0);
    assert_eq!(step(&p, &f, &settings()), Step::StartClock);
}

#[test]
fn invalid_parameters_and_counts_fail_naming_the_field() {
    let base = pr(CHECK_CAPACITY, &[], json!({}));
    let with = |params: serde_json::Value, count: i64| {
        let mut v = serde_json::to_value(&base).unwrap();
        v["spec"]["parameters"] = params;
        v["spec"]["podSets"][0]["count"] = json!(count);
        serde_json::from_value::<ProvisioningRequest>(v).unwrap()
    };
    let cases = [
        (
            json!({"ValidUntilSeconds": "-5"}),
            1,
            reasons::INVALID_PARAMETERS,
            "ValidUntilSeconds=\"-5\"",
        ),
        (
            json!({"ValidUntilSeconds": "1.5"}),
            1,
            reasons::INVALID_PARAMETERS,
            "ValidUntilSeconds",
        ),
        (
            json!({"BookingDurationSeconds": "abc"}),
            1,
            reasons::INVALID_PARAMETERS,
            "BookingDurationSeconds=\"abc\"",
        ),
        (
            json!({"BookingDurationSeconds": "99999999999999999999"}),
            1,
            reasons::INVALID_PARAMETERS,
            "BookingDurationSeconds",
        ),
        (
            json!({"noRetry": "maybe"}),
            1,
            reasons::INVALID_PARAMETERS,
            "noRetry=\"maybe\"",
        ),
        (
            json!({}),
            -1,
            reasons::INVALID,
            "spec.podSets[0].count is -1",
        ),
        (json!({}), 10_001, reasons::INVALID, "asks for 10001 pods"),
        (
            json!({}),
            i64::from(i32::MAX),
            reasons::INVALID,
            "at most 10000",
        ),
    ];
    for (params, count, want_reason, want) in cases {
        let p = with(params.clone(), count);
        match step(&p, &facts(T0, &[], 0), &settings()) {
            Step::Fail { reason, message } => {
                assert_eq!(reason, want_reason, "{params} {count}");
                assert!(message.contains(want), "{message} lacks {want}");
            }
            other => panic!("{params} {count}: {other:?}"),
        }
    }
    for ok in [
        json!({"noRetry": "false", "ValidUntilSeconds": "0", "BookingDurationSeconds": "3600"}),
        json!({"noRetry": "TRUE"}),
    ] {
        assert_eq!(
            step(&with(ok.clone(), 10_000), &facts(T0, &[], 0), &settings()),
            Step::Accept,
            "{ok}"
        );
    }
}

#[test]
fn a_huge_request_builds_no_pod() {
    let mut p = pr(CHECK_CAPACITY, &[], json!({}));
    p.spec.pod_sets[0].count = i32::MAX;
    let t = template();
    let templates = BTreeMap::from([(("ml".to_string(), "ppt-train-main".to_string()), &t)]);
    // One translated pod per pod set, whatever the count.
    let sh = shapes(&p, &templates).unwrap();
    assert_eq!(sh.len(), 1);
    assert_eq!(sh[0].1, i32::MAX as u32);
    assert!(
        matches!(pods(&p, &templates, 10_000, &BTreeMap::new()), Err(PodsError::Invalid(m)) if m.contains("2147483647 pods"))
    );
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

fn template() -> PodTemplate {
    serde_json::from_value(json!({
        "metadata": {"name": "ppt-train-main", "namespace": "ml"},
        "template": {"metadata": {"labels": {"app": "train"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}
    }))
    .unwrap()
}

#[test]
fn pods_come_from_the_templates_in_the_request_group() {
    let p = pr(CHECK_CAPACITY, &[], json!({}));
    let t = template();
    let mut templates = BTreeMap::new();
    assert_eq!(
        pods(&p, &templates, 10, &BTreeMap::new()).unwrap_err(),
        PodsError::Missing("PodTemplate ml/ppt-train-main (spec.podSets[0]) not found".into())
    );
    templates.insert(("ml".to_string(), "ppt-train-main".to_string()), &t);
    let made = pods(&p, &templates, 10, &BTreeMap::new()).unwrap();
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
fn a_templates_namespace_selector_reads_the_namespaces_labels() {
    // The request's pods keep away from `app=db` pods of namespaces labelled `team=data`:
    // resolved against the Namespaces as the snapshot's pods are, and shared by the copies.
    let p = pr(CHECK_CAPACITY, &[], json!({}));
    let t: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": "ppt-train-main", "namespace": "ml"},
        "template": {"metadata": {"labels": {"app": "train"}}, "spec": {
            "containers": [{"name": "c"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "db"}},
                "namespaceSelector": {"matchLabels": {"team": "data"}}}]}}}}
    }))
    .unwrap();
    let templates = BTreeMap::from([(("ml".to_string(), "ppt-train-main".to_string()), &t)]);
    let namespaces = BTreeMap::from([
        (
            "db".to_string(),
            [("team".to_string(), "data".to_string())].into(),
        ),
        ("ml".to_string(), BTreeMap::new()),
    ]);
    let made = pods(&p, &templates, 10, &namespaces).unwrap();
    assert_eq!(
        made[0].anti_affinity[0].namespaces,
        autoscaler_core::model::TermNamespaces::Listed(["db".to_string()].into())
    );
    assert!(made[0].shares_shape_with(&made[1]));
}

#[test]
fn an_untranslatable_template_is_invalid_naming_the_field() {
    let p = pr(CHECK_CAPACITY, &[], json!({}));
    let t: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": "ppt-train-main", "namespace": "ml"},
        "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}
    }))
    .unwrap();
    let templates = BTreeMap::from([(("ml".to_string(), "ppt-train-main".to_string()), &t)]);
    match pods(&p, &templates, 10, &BTreeMap::new()) {
        Err(PodsError::Invalid(m)) => assert!(
            m.contains("PodTemplate ml/ppt-train-main: template.spec.containers[0]"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_pin_label_is_offered_for_the_value_most_pending_pods_require() {
    let t = itype("g4dn.xlarge")
        .cpu("4")
        .mem("16Gi")
        .gpus(1, "T4", 16)
        .on_demand(&["us-east-1a"], 0.5)
        .build();
    let pool = autoscaler_core::builders::pool("gpu", vec![t]).build();
    let mut snap = Snapshot {
        pools: vec![pool],
        pending: vec![
            pod("a").gpus(1).select(PIN_LABEL, "r1").build(),
            pod("b").gpus(1).select(PIN_LABEL, "r2").build(),
            pod("c").gpus(1).select(PIN_LABEL, "r2").build(),
            pod("d").gpus(1).build(),
        ],
        ..Snapshot::default()
    };
    assert_eq!(pinned_to(&snap.pending[0]), Some("r1"));
    assert_eq!(pinned_to(&snap.pending[3]), None);
    offer_pin(&mut snap);
    assert_eq!(
        snap.pools[0].labels.get(PIN_LABEL).map(String::as_str),
        Some("r2")
    );
    let plan = autoscaler_core::provision::plan_provisioning(&snap);
    // r2's pods and the unpinned pod get nodes carrying r2; r1's pod waits for a later plan.
    assert!(
        plan.new_claims
            .iter()
            .all(|c| c.labels.get(PIN_LABEL).map(String::as_str) == Some("r2"))
    );
    let placed: usize = plan.new_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 3, "{plan:#?}");
    assert_eq!(plan.unschedulable.len(), 1);
    assert_eq!(plan.unschedulable[0].pod.name, "a");
    // Without pinned pods, pools are left as they are.
    let mut plain = Snapshot {
        pending: vec![pod("d").gpus(1).build()],
        ..snap.clone()
    };
    plain.pools[0].labels.remove(PIN_LABEL);
    offer_pin(&mut plain);
    assert!(!plain.pools[0].labels.contains_key(PIN_LABEL));
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
    // Targets are walked in order: node/gone, node/n1, claim/c1.
    assert_eq!(snap.in_flight[0].pods.len(), 1);
    assert_eq!(snap.nodes[0].pods.len(), 2);
    assert!(snap.booked_nodes.contains("n1"));
    assert_eq!(snap.booked_nodes.len(), 1);
}

/// A consuming pod frees the place it took: on a booked Node, or on the Node a booked claim
/// registered as; one bound elsewhere frees the last place still held.
#[test]
fn places_left_free_the_places_the_pods_took() {
    let booking = Booking::parse("node/n1=1,claim/c1=2,claim/c2=1").unwrap();
    let claim_of = |n: &str| (n == "c2-node").then_some("c2");
    let left = |on: &[&str]| places_left(&booking, on, claim_of).render();
    assert_eq!(left(&[]), booking.render());
    assert_eq!(left(&["n1"]), "node/n1=0,claim/c1=2,claim/c2=1");
    assert_eq!(left(&["c2-node"]), "node/n1=1,claim/c1=2,claim/c2=0");
    // Elsewhere: the last place in booking order still held goes.
    assert_eq!(left(&["other"]), "node/n1=1,claim/c1=2,claim/c2=0");
    assert_eq!(
        left(&["c2-node", "other", "other"]),
        "node/n1=1,claim/c1=0,claim/c2=0"
    );
    // What is left holds as many phantoms as pods still to come.
    let mut snap = Snapshot::default();
    snap.nodes.push(
        node(
            "n1",
            &itype("g6.12xlarge")
                .gpus(4, "L4", 24)
                .on_demand(&["a"], 4.6)
                .build(),
            "a",
        )
        .build(),
    );
    let pods: Vec<_> = (0..4).map(|i| pod(&format!("p{i}")).build()).collect();
    hold(
        &mut snap,
        &places_left(&booking, &["c2-node"], claim_of),
        phantoms(pods, 1),
    );
    assert_eq!(snap.nodes[0].pods.len(), 1);
}

#[test]
fn consuming_pods_name_their_request_under_either_annotation() {
    for key in [CONSUME_ANNOTATION, CONSUME_ANNOTATION_CA] {
        let p = pod("w").ns("ml").annotate(key, "train").build();
        assert_eq!(consumed_request(&p).as_deref(), Some("ml/train"));
    }
    assert_eq!(consumed_request(&pod("w").build()), None);
}

#[test]
fn pods_of_live_requests_and_of_other_backends_requests_get_no_scale_up_of_their_own() {
    let named = |name: &str, p: ProvisioningRequest| {
        let mut p = p;
        p.metadata.name = Some(name.into());
        std::sync::Arc::new(p)
    };
    let prs = vec![
        named(
            "waiting",
            pr(CHECK_CAPACITY, &[("Accepted", "True", T0)], json!({})),
        ),
        named(
            "ended",
            pr(CHECK_CAPACITY, &[("Failed", "True", T0)], json!({})),
        ),
        named("gke", pr("queued-provisioning.gke.io", &[], json!({}))),
    ];
    let live: Vec<String> = live(&prs).into_iter().collect();
    assert_eq!(live, ["ml/gke", "ml/waiting"]);
}

#[test]
fn a_restart_finds_the_retry_schedule_again() {
    let mut r = pr(
        BEST_EFFORT_ATOMIC,
        &[("Accepted", "True", T0), ("Provisioned", "False", T0)],
        json!({}),
    );
    let set = |r: &mut ProvisioningRequest, message: &str| {
        let c = &mut r.status.as_mut().unwrap().conditions[1];
        c.message = message.into();
    };
    set(&mut r, "no capacity: 2 pods do not fit; retrying");
    // Retries at T0, +10, +30 (10 then 20 s apart), the next at +70 (40 s later).
    assert_eq!(restored_backoff(&r, 10, 60, T0 + 35), Some((3, T0 + 70)));
    assert_eq!(restored_backoff(&r, 10, 60, T0 + 5), Some((1, T0 + 10)));
    // Past the cap the retries are max apart: T0, +10, +30, +70, +130 done, the next at +190.
    assert_eq!(restored_backoff(&r, 10, 60, T0 + 130), Some((5, T0 + 190)));
    // Not retrying (the first check not made yet, or provisioned): nothing to restore.
    set(&mut r, "waiting for the first capacity check");
    assert_eq!(restored_backoff(&r, 10, 60, T0 + 35), None);
    let done = pr(
        BEST_EFFORT_ATOMIC,
        &[("Accepted", "True", T0), ("Provisioned", "True", T0)],
        json!({}),
    );
    assert_eq!(restored_backoff(&done, 10, 60, T0 + 35), None);
}
