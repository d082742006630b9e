//! The example NodePools in `deploy/examples/` load, validate cleanly in Rust, pass the CRD's
//! own checks, and survive a serialization round trip.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use nodepools::NodePool;

fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("deploy/examples exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (stem, std::fs::read_to_string(&p).expect("readable example"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_four_examples_exist() {
    let names: Vec<String> = examples().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["cpu-default", "gpu-inference", "gpu-train", "notebooks"]
    );
}

#[test]
fn every_example_loads_and_validates() {
    for (name, text) in examples() {
        let pools = nodepools::load_nodepools(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(pools.len(), 1, "{name}: one NodePool per file");
        let pool = &pools[0];
        assert_eq!(pool.metadata.name.as_deref(), Some(name.as_str()));
        let core = pool
            .to_core(Arc::new(Vec::new()))
            .unwrap_or_else(|e| panic!("{name}:\n{e}"));
        assert_eq!(core.name, name);
        let raw: serde_json::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(
            common::server_side("NodePool", &raw),
            Vec::<String>::new(),
            "{name}: the CRD rejects it"
        );
        let again: NodePool = serde_json::from_value(serde_json::to_value(pool).unwrap()).unwrap();
        assert_eq!(&again, pool, "{name}: round trip");
    }
}

#[test]
fn examples_parse_into_the_expected_core_pools() {
    let get = |wanted: &str| {
        let (_, text) = examples().into_iter().find(|(n, _)| n == wanted).unwrap();
        nodepools::load_nodepools(&text).unwrap()[0]
            .to_core(Arc::new(Vec::new()))
            .unwrap()
    };
    let train = get("gpu-train");
    assert_eq!(train.weight, 50);
    assert_eq!(
        train.taints[0].to_string(),
        "nvidia.com/gpu=present:NoSchedule"
    );
    assert_eq!(train.limits.gpus_by_model["H100"], 64);
    assert_eq!(train.limits.nodes, Some(16));
    assert_eq!(train.limits.resources["cpu"], 2_000_000);
    assert_eq!(train.limits.resources["memory"], 16 << 40);
    assert_eq!(train.labels["gpu-autoscaler.dev/nodepool"], "gpu-train");
    assert_eq!(
        train.disruption.consolidation_policy,
        autoscaler_core::model::ConsolidationPolicy::WhenEmpty
    );
    assert_eq!(train.disruption.consolidate_after_s, 600);
    assert_eq!(train.disruption.unneeded_s, 600, "default unneededTime");

    let inference = get("gpu-inference");
    let mig = inference.sharing.mig.unwrap();
    assert_eq!(mig.config, "all-1g.10gb");
    // Its nodes carry the configuration the MIG manager applies.
    assert_eq!(inference.labels["nvidia.com/mig.config"], "all-1g.10gb");
    assert_eq!(mig.strategy, autoscaler_core::model::MigStrategy::Mixed);
    assert_eq!(inference.disruption.gpu_utilization_threshold, 0.4);
    assert_eq!(inference.disruption.budgets.len(), 2);

    let notebooks = get("notebooks");
    assert_eq!(notebooks.sharing.time_slicing.unwrap().replicas, 4);
    assert_eq!(notebooks.min_nodes, 1);

    let cpu = get("cpu-default");
    assert!(cpu.sharing.time_slicing.is_none() && cpu.sharing.mig.is_none());
    assert_eq!(cpu.disruption.budgets.len(), 1, "default budget");
}

#[test]
fn the_notebooks_example_with_mps_instead_of_time_slicing_loads_as_mps() {
    let (_, text) = examples()
        .into_iter()
        .find(|(n, _)| n == "notebooks")
        .unwrap();
    let text = text.replace("timeSlicing:", "mps:");
    assert!(text.contains("mps:"), "the example time-slices");
    let pool = &nodepools::load_nodepools(&text).unwrap()[0];
    let core = pool.to_core(Arc::new(Vec::new())).unwrap();
    let mps = core.sharing.time_slicing.unwrap();
    assert!(mps.mps && mps.one_replica_each(), "{mps:?}");
    assert_eq!(mps.replicas, 4);
    let raw: serde_json::Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(
        common::server_side("NodePool", &raw),
        Vec::<String>::new(),
        "the CRD accepts it"
    );
}

#[test]
fn loading_reports_wrong_kinds_and_all_problems() {
    let e = nodepools::load_nodepools("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "reading YAML document 0: expected NodePool of gpu-autoscaler.dev/v1alpha1, found v1/ConfigMap"
    );
    let text = "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {name: x}\n\
                spec:\n  template: {}\n  weight: 0\n  minNodes: -2\n";
    let e = nodepools::load_nodepools(text).unwrap_err();
    assert_eq!(
        e.to_string(),
        "validating NodePool \"x\":\nspec.weight: 0 is outside [1, 100]\nspec.minNodes: must not be negative"
    );
    let two = "---\napiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {name: a}\n\
               spec: {template: {}}\n---\napiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\n\
               metadata: {name: b}\nspec: {template: {}}\n";
    assert_eq!(nodepools::load_nodepools(two).unwrap().len(), 2);
    let unnamed = "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {}\nspec: {template: {}}\n";
    let e = nodepools::load_nodepools(unnamed).unwrap_err();
    assert!(e.to_string().ends_with("metadata.name: must be set"), "{e}");
}

/// Files are read strictly: a misspelled field is an error naming its path and the field meant,
/// reported with the object's other problems; the same object read as the API server serves
/// it (plain serde, which the controller's watches use) keeps working.
#[test]
fn loading_files_rejects_unknown_fields_with_the_closest_known_one() {
    let text = "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\n\
                metadata: {name: x, lables: {a: b}}\n\
                spec:\n  template: {}\n  minNodes: -1\n  disruption:\n    gpuUtilisationThreshold: 0.3\n";
    let e = nodepools::load_nodepools(text).unwrap_err();
    assert_eq!(
        e.to_string(),
        "validating NodePool \"x\":\n\
         metadata.lables: unknown field (did you mean labels?)\n\
         spec.disruption.gpuUtilisationThreshold: unknown field (did you mean gpuUtilizationThreshold?)\n\
         spec.minNodes: must not be negative"
    );
    let e = nodepools::from_yaml::<nodepools::NodeClaim>(
        "NodeClaim",
        "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodeClaim\nmetadata: {name: c}\n\
         spec: {nodePool: p, requirments: []}\n",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .ends_with("spec.requirments: unknown field (did you mean requirements?)"),
        "{e}"
    );
    let lenient: nodepools::NodePool = serde_norway::from_str(text).unwrap();
    assert_eq!(lenient.spec.disruption.gpu_utilization_threshold, 0.5);
}

/// `spec.template.expireAfter` reads as Karpenter's: a duration, `Never`, or absent (never).
#[test]
fn expire_after_is_a_duration_never_or_absent() {
    let expire = |value: Option<&str>| {
        let field = value.map_or(String::new(), |v| format!("\n    expireAfter: {v}"));
        let text = format!(
            "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  template:\n    requirements: []{field}\n"
        );
        nodepools::load_nodepools(&text).unwrap()[0]
            .to_core(Arc::new(Vec::new()))
            .unwrap()
            .disruption
            .expire_after_s
    };
    assert_eq!(expire(Some("720h")), Some(720 * 3600));
    assert_eq!(expire(Some("1.5h")), Some(5400));
    assert_eq!(expire(Some("Never")), None);
    assert_eq!(expire(None), None);
}

/// `spec.template.terminationGracePeriod` reads as a number of seconds, absent as none (the
/// drain waits for protected pods as long as they run).
#[test]
fn termination_grace_period_is_a_duration_or_absent() {
    let grace = |value: Option<&str>| {
        let field = value.map_or(String::new(), |v| {
            format!("\n    terminationGracePeriod: {v}")
        });
        let text = format!(
            "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  template:\n    requirements: []{field}\n"
        );
        nodepools::load_nodepools(&text).unwrap()[0]
            .to_core(Arc::new(Vec::new()))
            .unwrap()
            .disruption
            .termination_grace_period_s
    };
    assert_eq!(grace(Some("1h")), Some(3600));
    assert_eq!(grace(Some("90s")), Some(90));
    assert_eq!(grace(Some("0s")), Some(0));
    assert_eq!(grace(None), None);
}
