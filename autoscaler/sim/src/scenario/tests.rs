//! Scenario parsing: the bundled scenarios load, and bad input names file, line and field.

use super::*;

#[test]
fn bundled_scenarios_load() {
    let s = Scenario::default_scenario().unwrap();
    assert_eq!(s.name, "default");
    assert_eq!(s.pools.len(), 4);
    assert_eq!(s.duration_s, 24 * 3600);
    assert!(s.workloads.len() >= 6);
    let o = Scenario::parse(
        Path::new("openb.yaml"),
        crate::openb_workload::OPENB_SCENARIO_YAML,
    )
    .unwrap();
    assert_eq!(o.pools.len(), 2);
}

#[test]
fn the_untainted_openb_scenario_differs_from_the_bundled_one_by_the_gpu_taint_only() {
    let bundled = Scenario::parse(
        Path::new("openb.yaml"),
        crate::openb_workload::OPENB_SCENARIO_YAML,
    )
    .unwrap();
    let mut untainted = Scenario::parse(
        Path::new("openb-untainted.yaml"),
        include_str!("../../scenarios/openb-untainted.yaml"),
    )
    .unwrap();
    let gpu = |s: &Scenario| s.pools.iter().position(|p| p.name == "gpu").unwrap();
    let (bi, ui) = (gpu(&bundled), gpu(&untainted));
    assert!(!bundled.pools[bi].taints.is_empty());
    assert!(
        untainted.pools[ui].taints.is_empty(),
        "{:?}",
        untainted.pools[ui].taints
    );
    untainted.pools[ui].taints = bundled.pools[bi].taints.clone();
    assert_eq!(untainted.pools, bundled.pools);
    assert_eq!(untainted.cluster, bundled.cluster);
    assert_eq!(untainted.seed, bundled.seed);
    assert_eq!(untainted.duration_s, bundled.duration_s);
}

const GOOD: &str = "\
name: tiny
duration: 2h
catalog: aws
pools:
  - name: cpu
    families: [m6i]
workloads:
  - jobs:
      name: etl
      arrivals: {perHour: 10}
      duration: {min: 5m, max: 10m}
      pod: {nodePool: cpu, cpu: 500m, memory: 1Gi}
";

fn err(text: &str) -> (usize, String, String) {
    match Scenario::parse(Path::new("bad.yaml"), text).unwrap_err() {
        SimError::Scenario {
            path,
            line,
            field,
            why,
        } => {
            assert_eq!(path, Path::new("bad.yaml"));
            (line, field, why)
        }
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn a_good_file_parses() {
    let s = Scenario::parse(Path::new("good.yaml"), GOOD).unwrap();
    assert_eq!(s.name, "tiny");
    assert_eq!(s.duration_s, 7200);
    assert_eq!(s.workloads[0].template.requests.cpu, 500);
}

#[test]
fn disruption_options_reach_the_policy() {
    let text = GOOD.replace(
        "catalog: aws\n",
        "catalog: aws\ncluster:\n  scaleDownDelayAfterDelete: 1m\n  scaleDownDelayAfterFailure: 5m\n  ignoreDaemonsetsUtilization: true\n  ignoreMirrorPodsUtilization: true\n",
    );
    let s = Scenario::parse(Path::new("good.yaml"), &text).unwrap();
    let p = crate::policy::GpuAutoscaler::new(&s.cluster);
    assert_eq!(p.config.delay_after_delete_s, 60);
    assert_eq!(p.config.delay_after_failure_s, 300);
    assert!(p.config.ignore_daemonset_utilization && p.config.ignore_mirror_utilization);
    // Defaults are Cluster Autoscaler's.
    let d =
        crate::policy::GpuAutoscaler::new(&Scenario::parse(Path::new("g"), GOOD).unwrap().cluster);
    assert_eq!(
        (
            d.config.delay_after_delete_s,
            d.config.delay_after_failure_s
        ),
        (0, 180)
    );
    assert!(!d.config.ignore_daemonset_utilization);
}

#[test]
fn missing_field_names_line_and_field() {
    let text = GOOD.replace("      duration: {min: 5m, max: 10m}\n", "");
    let (line, field, why) = err(&text);
    assert_eq!(line, 9, "{field}: {why}");
    assert_eq!(field, "workloads[0].jobs");
    assert!(why.contains("missing field `duration`"), "{why}");
}

#[test]
fn negative_duration_is_rejected_where_it_is() {
    let text = GOOD.replace("min: 5m", "min: -5m");
    let (line, field, why) = err(&text);
    assert_eq!(line, 11);
    assert_eq!(field, "workloads[0].jobs.duration.min");
    assert!(why.contains("negative duration"), "{why}");
    let (line, field, _) = err(&GOOD.replace("duration: 2h", "duration: -3"));
    assert_eq!((line, field.as_str()), (2, "duration"));
}

#[test]
fn unknown_nodepool_is_named() {
    let text = GOOD.replace("nodePool: cpu,", "nodePool: gpu,");
    let (line, field, why) = err(&text);
    assert_eq!(line, 12);
    assert_eq!(field, "workloads[0].jobs.pod.nodePool");
    assert!(why.contains("unknown NodePool \"gpu\""), "{why}");
}

#[test]
fn a_policy_listed_twice_is_refused() {
    let text = format!("{GOOD}policies: [gpu-autoscaler, ca-like, gpu-autoscaler]\n");
    let (line, field, why) = err(&text);
    assert_eq!(line, 13);
    assert_eq!(field, "policies[2]");
    assert!(why.contains("\"gpu-autoscaler\" is listed twice"), "{why}");
}

#[test]
fn unknown_resource_is_named() {
    let text = GOOD.replace(
        "memory: 1Gi}",
        "memory: 1Gi, resources: {example.com/fpga: 1}}",
    );
    let (line, field, why) = err(&text);
    assert_eq!(line, 12);
    assert_eq!(
        field,
        "workloads[0].jobs.pod.resources[\"example.com/fpga\"]"
    );
    assert!(why.contains("unknown resource"), "{why}");
}

#[test]
fn unknown_field_and_bad_quantity_and_unknown_type() {
    let (line, field, why) = err(&GOOD.replace("catalog: aws", "catalog: aws\nflavour: x"));
    assert_eq!(line, 4);
    assert_eq!(field, "(document)");
    assert!(why.contains("unknown field `flavour`"), "{why}");
    let (line, field, _) = err(&GOOD.replace("cpu: 500m", "cpu: lots"));
    assert_eq!((line, field.as_str()), (12, "workloads[0].jobs.pod.cpu"));
    let (line, field, why) = err(&GOOD.replace("families: [m6i]", "instanceTypes: [m9.huge]"));
    assert_eq!((line, field.as_str()), (6, "pools[0].instanceTypes"));
    assert!(why.contains("unknown instance type"), "{why}");
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("90"), Ok(90));
    assert_eq!(parse_duration("1h30m"), Ok(5400));
    assert_eq!(parse_duration("1.5h"), Ok(5400));
    assert_eq!(parse_duration("2d"), Ok(172_800));
    assert!(parse_duration("-1m").unwrap_err().contains("negative"));
    assert!(parse_duration("5x").is_err());
    assert!(parse_duration("5").is_ok());
    assert!(parse_duration("1h5").is_err());
}

#[test]
fn nodepool_objects_are_accepted() {
    let text = "\
duration: 1h
catalog: aws
nodePools:
  - apiVersion: gpu-autoscaler.dev/v1alpha1
    kind: NodePool
    metadata: {name: gpus}
    spec:
      template:
        requirements:
          - {key: gpu-autoscaler.dev/instance-gpu-name, operator: In, values: [l4]}
workloads:
  - jobs:
      name: j
      arrivals: {every: 10m}
      duration: {fixed: 5m}
      pod: {nodePool: gpus, cpu: 1, gpus: 1}
";
    let s = Scenario::parse(Path::new("np.yaml"), text).unwrap();
    assert_eq!(s.pools[0].name, "gpus");
}

/// A NodePool's `expireAfter`, `terminationGracePeriod` or a disruption budget's `schedule`
/// is refused by name: the simulator would ignore it.
#[test]
fn unmodelled_nodepool_fields_are_refused_rather_than_ignored() {
    let budget = "template: {}\n      disruption:\n        budgets:\n          - nodes: \"0\"\n            schedule: \"@daily\"\n            duration: 1h";
    for (field, spec, line_of) in [
        ("expireAfter", "template:\n        expireAfter: 24h", 9),
        (
            "terminationGracePeriod",
            "template:\n        terminationGracePeriod: 1h",
            9,
        ),
        ("schedule", budget, 12),
    ] {
        let text = format!(
            "\
duration: 1h
catalog: aws
nodePools:
  - apiVersion: gpu-autoscaler.dev/v1alpha1
    kind: NodePool
    metadata: {{name: gpus}}
    spec:
      {spec}
workloads: []
"
        );
        let (line, at, why) = err(&text);
        assert_eq!((line, at.as_str()), (line_of, "nodePools"), "{field}");
        assert!(
            why.contains(&format!("NodePool gpus: {field} is not simulated")),
            "{why}"
        );
    }
}

/// `GOOD` with a ProvisioningRequest workload whose last lines are `extra`.
fn with_request(extra: &str) -> String {
    format!(
        "{GOOD}  - provisioningRequests:
      name: eval
      size: 2
      arrivals: {{at: [10m]}}
      duration: {{fixed: 5m}}
      pod: {{nodePool: cpu, cpu: 1, memory: 1Gi}}
{extra}"
    )
}

fn request_spec(s: &Scenario) -> ProvReqSpec {
    match &s.workloads[1].generator {
        Generator::Groups {
            provisioning_request: Some(r),
            ..
        } => *r,
        other => panic!("not a request: {other:?}"),
    }
}

#[test]
fn provisioning_request_keys_and_defaults() {
    let s = Scenario::parse(Path::new("r.yaml"), &with_request("")).unwrap();
    assert_eq!(
        request_spec(&s),
        ProvReqSpec {
            class: ProvReqClass::BestEffortAtomic,
            booking_s: 600,
            admission_delay_s: 5,
        }
    );
    let text = with_request(
        "      class: check-capacity.autoscaling.x-k8s.io\n      bookingDuration: 1h\n      admissionDelay: 0s\n",
    );
    let s = Scenario::parse(Path::new("r.yaml"), &text).unwrap();
    assert_eq!(
        request_spec(&s),
        ProvReqSpec {
            class: ProvReqClass::CheckCapacity,
            booking_s: 3600,
            admission_delay_s: 0,
        }
    );
    // Gangs are not requests.
    let gang = GOOD.to_string()
        + "  - gangs:\n      name: g\n      size: 2\n      arrivals: {at: [1m]}\n      duration: {fixed: 5m}\n      pod: {nodePool: cpu, cpu: 1}\n";
    let s = Scenario::parse(Path::new("g.yaml"), &gang).unwrap();
    assert!(matches!(
        s.workloads[1].generator,
        Generator::Groups {
            provisioning_request: None,
            ..
        }
    ));
}

#[test]
fn bad_provisioning_request_values_name_line_and_field() {
    let (line, field, why) = err(&with_request("      class: queued-provisioning\n"));
    assert_eq!(line, 19, "{field}: {why}");
    assert_eq!(field, "workloads[1].provisioningRequests.class");
    assert!(
        why.contains("unknown provisioning class \"queued-provisioning\"")
            && why.contains("check-capacity"),
        "{why}"
    );
    let (line, field, why) = err(&with_request("      bookingDuration: 0s\n"));
    assert_eq!(line, 19, "{field}: {why}");
    assert_eq!(field, "workloads[1].provisioningRequests.bookingDuration");
    assert!(why.contains("must be positive"), "{why}");
    let (line, field, why) = err(&with_request("      admissionDelay: -5s\n"));
    assert_eq!(line, 19, "{field}: {why}");
    assert_eq!(field, "workloads[1].provisioningRequests.admissionDelay");
    assert!(why.contains("negative duration"), "{why}");
    let (line, field, why) = err(&with_request("      bookingDuration: soon\n"));
    assert_eq!(
        (line, field.as_str()),
        (19, "workloads[1].provisioningRequests.bookingDuration"),
        "{why}"
    );
    // No larger than the controller accepts; as large is fine.
    let (line, field, why) = err(&with_request("").replace("size: 2", "size: 10001"));
    assert_eq!(line, 15, "{field}: {why}");
    assert_eq!(field, "workloads[1].provisioningRequests.size");
    assert!(
        why.contains("10001 pods in one request") && why.contains("--provreq-max-pods"),
        "{why}"
    );
    let max = with_request("").replace("size: 2", "size: 10000");
    assert!(Scenario::parse(Path::new("r.yaml"), &max).is_ok());
    // Gangs do not take request keys.
    let gang =
        with_request("      class: check-capacity\n").replace("provisioningRequests:", "gangs:");
    let (_, _, why) = err(&gang);
    assert!(why.contains("unknown field `class`"), "{why}");
}

#[test]
fn an_mps_pool_loads_as_mps_and_bad_mps_names_its_line() {
    let gpu = GOOD.replace("families: [m6i]", "families: [g5]\n    mps: 4");
    let s = Scenario::parse(Path::new("mps.yaml"), &gpu).unwrap();
    let mps = s.pools[0].sharing.time_slicing.as_ref().unwrap();
    assert!(
        mps.mps && mps.one_replica_each() && mps.replicas == 4,
        "{mps:?}"
    );
    let (line, field, why) = err(&gpu.replace("mps: 4", "mps: 64"));
    assert_eq!((line, field.as_str()), (7, "pools[0].mps"), "{why}");
    assert!(why.contains("between 2 and 48"), "{why}");
    let (line, field, why) = err(&gpu.replace("mps: 4", "mps: 4\n    timeSlicing: 2"));
    assert_eq!((line, field.as_str()), (7, "pools[0].mps"), "{why}");
    assert!(why.contains("cannot be set with timeSlicing"), "{why}");
    // A pool named after the field: the line is the field's, not the name's.
    let named = gpu.replace("name: cpu", "name: mps");
    let (line, _, _) = err(&named.replace("mps: 4", "mps: 64"));
    assert_eq!(line, 7);
}

#[test]
fn a_min_nodes_its_pool_cannot_hold_is_refused_on_its_line() {
    let ok = GOOD.replace(
        "families: [m6i]",
        "families: [m6i]\n    minNodes: 2\n    limits: {nodes: 2}",
    );
    let s = Scenario::parse(Path::new("ok.yaml"), &ok).unwrap();
    assert_eq!(s.pools[0].min_nodes, 2);
    let (line, field, why) = err(&ok.replace("nodes: 2}", "nodes: 1}"));
    assert_eq!((line, field.as_str()), (7, "pools[0].minNodes"), "{why}");
    assert!(why.contains("2 exceeds limits[\"nodes\"] = 1"), "{why}");
    let atomic = GOOD.replace(
        "families: [m6i]",
        "families: [m6i]\n    minNodes: 2\n    atomicScaleUp: {nodes: 4}",
    );
    let (line, field, why) = err(&atomic);
    assert_eq!((line, field.as_str()), (7, "pools[0].minNodes"), "{why}");
    assert!(
        why.contains("must be 0 or atomicScaleUp.nodes (4)"),
        "{why}"
    );
}
