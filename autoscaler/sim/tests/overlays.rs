//! NodeOverlays in the simulator (`overlays:`): the catalog every part of a run reads is the
//! overlaid one, so a price overlay changes the type launched and billed, a capacity overlay
//! makes pods asking for a resource no type listed runnable, and a bad overlay is refused
//! naming its field.

use std::path::Path;

use autoscaler_sim::{RunOptions, Scenario, report, run};

const BASE: &str = "\
name: overlays
seed: 3
duration: 1h
catalog: aws
OVERLAYS
pools:
  - name: cpu
    instanceTypes: [c6i.xlarge, m5.xlarge, p4d.24xlarge]
    capacityTypes: [on-demand]
workloads:
  - deployment:
      name: web
      replicas: [{at: 0s, count: 2}]
      pod: POD
";

fn scenario(overlays: &str, pod: &str) -> Result<Scenario, String> {
    let text = BASE.replace("OVERLAYS\n", overlays).replace("POD", pod);
    Scenario::parse(Path::new("overlays.yaml"), &text).map_err(|e| e.to_string())
}

/// The project's policy: instance types billed, and pods pending at the end.
fn billed(s: &Scenario) -> (Vec<String>, u64) {
    let opts = RunOptions {
        policies: Some(vec!["gpu-autoscaler".into()]),
        ..Default::default()
    };
    let r = run(s, &opts, &|_, _| {}).unwrap();
    let p = &r.policies[0];
    assert_eq!(p.safety_violations, 0, "{}", report::summary(&r));
    (p.cost_by_type.keys().cloned().collect(), p.pending_at_end)
}

const WEB: &str = "{nodePool: cpu, cpu: 3, memory: 1Gi}";

#[test]
fn a_price_overlay_changes_the_type_launched() {
    let plain = scenario("", WEB).unwrap();
    assert_eq!(billed(&plain), (vec!["c6i.xlarge".to_string()], 0));
    let overlays = "\
overlays:
  - metadata: {name: c6i-licence}
    spec:
      requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c6i.xlarge]}]
      priceAdjustment: \"+50%\"
";
    let s = scenario(overlays, WEB).unwrap();
    assert_eq!(billed(&s), (vec!["m5.xlarge".to_string()], 0));
    let c6i = s.catalog.iter().find(|t| t.name == "c6i.xlarge").unwrap();
    for o in &c6i.offerings {
        let base = if o.capacity_type == autoscaler_core::CapacityType::OnDemand {
            0.17
        } else {
            0.068
        };
        assert!((o.price - base * 1.5).abs() < 1e-9, "{o:?}");
    }
}

#[test]
fn a_capacity_overlay_makes_a_mig_slice_runnable() {
    let slice = "{nodePool: cpu, cpu: 1, memory: 1Gi, resources: {nvidia.com/mig-1g.5gb: 1}}";
    let overlays = "\
overlays:
  - metadata: {name: a100-slices}
    spec:
      requirements: [{key: gpu-autoscaler.dev/instance-gpu-name, operator: In, values: [a100]}]
      capacity: {nvidia.com/mig-1g.5gb: 56}
";
    let s = scenario(overlays, slice).unwrap();
    assert_eq!(billed(&s), (vec!["p4d.24xlarge".to_string()], 0));
    // Without the overlay no type offers the resource: the scenario is refused.
    let Err(e) = scenario("", slice) else {
        panic!("accepted without the overlay");
    };
    assert!(
        e.contains(
            "unknown resource \"nvidia.com/mig-1g.5gb\": no instance type of NodePool cpu offers it"
        ),
        "{e}"
    );
}

#[test]
fn a_bad_overlay_names_its_field() {
    for (spec, says) in [
        (
            "{priceAdjustment: \"+1\", price: \"2\"}",
            "overlays[0]: spec: price and priceAdjustment are mutually exclusive",
        ),
        (
            "{capacity: {cpu: 2}}",
            "spec.capacity[\"cpu\"]: cpu is not an extended resource",
        ),
        (
            "{pricce: \"2\"}",
            "spec.pricce: unknown field (did you mean price?)",
        ),
    ] {
        let overlays = format!("overlays:\n  - metadata: {{name: bad}}\n    spec: {spec}\n");
        match scenario(&overlays, WEB) {
            Ok(_) => panic!("{spec}: accepted"),
            Err(e) => assert!(e.contains(says), "{spec}: {e}"),
        }
    }
}
