//! `gpu-autoscaler validate` through the real binary: the shipped examples pass, a file with
//! many mistakes gets every one of them with its document and field path and a non-zero exit,
//! standard input, directories and `--catalog-file` (`catalog --json` output) work.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use expect_test::expect;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `validate ARGS` in `autoscaler/tests/validate`, with `stdin`; exit code, stdout, stderr.
fn validate(args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .arg("validate")
        .args(args)
        .current_dir(root().join("autoscaler/tests/validate"))
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpu-autoscaler");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait for gpu-autoscaler");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_shipped_examples_are_valid() {
    let (code, stdout, stderr) = validate(&["../../../deploy/examples"], "");
    assert_eq!(code, Some(0), "{stderr}");
    // deploy/examples/dra holds the DRA examples (DeviceClasses, a claim template, a pod):
    // other APIs, skipped.
    assert_eq!(
        stdout,
        "ok: 4 object(s) in 6 file(s), 4 document(s) of other APIs skipped valid\n"
    );
    let files: Vec<String> = std::fs::read_dir(root().join("deploy/examples"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    let args: Vec<&str> = files.iter().map(String::as_str).collect();
    let (code, _, stderr) = validate(&args, "");
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn every_problem_is_named_with_its_document_and_path() {
    let (code, stdout, stderr) = validate(&["bad-pools.yaml"], "");
    assert_eq!(code, Some(1));
    assert_eq!(stdout, "");
    expect![[r#"
        bad-pools.yaml: doc 1: spec.disruption.budgets[0].nodes: "150%" does not match ^((100|[0-9]{1,2})%|[0-9]+)$
        bad-pools.yaml: doc 1: spec.disruption.gpuUtilisationThreshold: unknown field (did you mean gpuUtilizationThreshold?)
        bad-pools.yaml: doc 1: spec.template: taints must not repeat a key and effect
        bad-pools.yaml: doc 1: spec.template.requirements[2].values[0]: capacity type "spott" is not spot or on-demand
        bad-pools.yaml: doc 1: spec.template.taints[1]: duplicate taint key "nvidia.com/gpu" effect NoSchedule (already at spec.template.taints[0])
        bad-pools.yaml: doc 1: spec.template.requirements[0].values[0]: "H100" is not a value of gpu-autoscaler.dev/instance-gpu-name in the catalog (did you mean "h100"? GPU names in labels are lower case)
        bad-pools.yaml: doc 1: spec.template.requirements[1].values[0]: "p5.48xlarg" is not a value of node.kubernetes.io/instance-type in the catalog (did you mean "p5.48xlarge"?)
        bad-pools.yaml: doc 1: spec.gpuLimits["h100"]: no GPU model "h100" in the catalog (did you mean "H100"? GPU models are named as in the catalog)
        bad-pools.yaml: doc 3: spec.template.taints[0].effect: "NoSchedul" is not one of "NoSchedule", "PreferNoSchedule", "NoExecute" (did you mean "NoSchedule"?)
        bad-pools.yaml: doc 3: spec.weight: 0 is less than 1
        bad-pools.yaml: doc 3: spec.minNodes: 3 exceeds limits["nodes"] = 2
        bad-pools.yaml: doc 4: kind: "NodePol" is not a kind of gpu-autoscaler.dev (NodePool, NodeClaim, CapacityQuota, NodeOverlay) (did you mean NodePool?)
        Error: 12 problem(s) in 3 object(s) in 1 file(s), 1 document(s) of other APIs skipped
    "#]]
    .assert_eq(&stderr);
}

#[test]
fn standard_input_and_yaml_errors() {
    let good = std::fs::read_to_string(root().join("deploy/examples/cpu-default.yaml")).unwrap();
    let (code, stdout, stderr) = validate(&["-"], &good);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "ok: 1 object(s) in 1 file(s) valid\n");
    let (code, _, stderr) = validate(&["-"], "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: [\n");
    assert_eq!(code, Some(1));
    assert!(stderr.starts_with("<stdin>:3:1: "), "{stderr}");
    let (code, _, stderr) = validate(&["missing.yaml"], "");
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with("missing.yaml: cannot read: "),
        "{stderr}"
    );
    let (code, _, stderr) = validate(&["-"], "apiVersion: v1\nkind: ConfigMap\n");
    assert_eq!(code, Some(1), "nothing of ours to check is a mistake");
    assert!(
        stderr.contains(
            "no NodePool, NodeClaim, CapacityQuota or NodeOverlay found in 1 file(s), 1 document(s) of other APIs skipped"
        ),
        "{stderr}"
    );
}

#[test]
fn catalog_file_from_catalog_json() {
    let (code, stdout, stderr) = validate(&["--catalog-file", "small-catalog.json", "g5.yaml"], "");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "ok: 1 object(s) in 1 file(s) valid\n");
    // The embedded catalog's H100 types are not in this one.
    let train = root().join("deploy/examples/gpu-train.yaml");
    let (code, _, stderr) = validate(
        &[
            "--catalog-file",
            "small-catalog.json",
            train.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(
            "gpu-train.yaml: doc 1: spec.gpuLimits[\"H100\"]: no GPU model \"H100\" in the catalog"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = validate(&["--provider", "gcp", "g5.yaml"], "");
    assert_eq!(code, Some(1), "g5.xlarge is an AWS type");
    assert!(
        stderr.contains("\"g5.xlarge\" is not a value of node.kubernetes.io/instance-type"),
        "{stderr}"
    );
}

#[test]
fn capacity_quotas_and_node_overlays_are_checked() {
    let (code, stdout, stderr) = validate(&["quota-and-overlays.yaml"], "");
    assert_eq!(code, Some(1));
    assert_eq!(stdout, "");
    expect![[r#"
        quota-and-overlays.yaml: doc 3: spec.selector.matchExpressions[0].values: In needs at least one value
        quota-and-overlays.yaml: doc 4: spec: price and priceAdjustment are mutually exclusive
        quota-and-overlays.yaml: doc 4: spec.capacity["memory"]: memory is not an extended resource; an overlay cannot change it
        quota-and-overlays.yaml: doc 4: spec.requirements[0].values[0]: "p5.48xlarg" is not a value of node.kubernetes.io/instance-type in the catalog (did you mean "p5.48xlarge"?)
        Error: 4 problem(s) in 4 object(s) in 1 file(s)
    "#]]
    .assert_eq(&stderr);
}

/// A budget's cron schedule is checked field by field, and `schedule` and `duration` come
/// together (the CRD's CEL rule and validation both say so; the controller's check restates
/// the rule, so the problem is reported once, in the rule's words).
#[test]
fn budget_schedules_are_checked() {
    let pool = |budgets: &str| {
        format!(
            "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  template: {{}}\n  disruption:\n    budgets:\n{budgets}"
        )
    };
    let good = pool("      - {nodes: \"0\", schedule: \"0 9 * * mon-fri\", duration: 8h}\n");
    let (code, stdout, stderr) = validate(&["-"], &good);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "ok: 1 object(s) in 1 file(s) valid\n");
    let bad = pool(
        "      - {nodes: \"10%\"}\n      - {nodes: \"0\", schedule: \"0 9 * * 1-9\", duration: 8h}\n      - {nodes: \"0\", schedule: \"@daily\"}\n      - {nodes: \"0\", duration: 1h}\n",
    );
    let (code, _, stderr) = validate(&["-"], &bad);
    assert_eq!(code, Some(1));
    expect![[r#"
        <stdin>: doc 1: spec.disruption.budgets[2]: 'schedule' must be set with 'duration'
        <stdin>: doc 1: spec.disruption.budgets[3]: 'schedule' must be set with 'duration'
        <stdin>: doc 1: spec.disruption.budgets[1].schedule: invalid schedule "0 9 * * 1-9": day-of-week field "1-9": 9 is outside 0..=6
        Error: 3 problem(s) in 1 object(s) in 1 file(s)
    "#]].assert_eq(&stderr);
}

/// A budget whose schedule is malformed and has no duration gets both problems: the pairing
/// rule must not hide the malformed schedule (moving the CEL rule onto `.schedule` did).
#[test]
fn a_malformed_schedule_without_duration_keeps_both_problems() {
    let text = "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  template: {}\n  disruption:\n    budgets:\n      - {nodes: \"0\", schedule: \"0 9 * * 1-9\"}\n";
    let (code, _, stderr) = validate(&["-"], text);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("9 is outside 0..=6") && stderr.contains("must be set with 'duration'"),
        "{stderr}"
    );
}

/// A budget with `schedule: null` has no schedule (the controller reads null as absent), though
/// the CRD's rule passes (`has()` is true on an explicit null): the missing schedule is still
/// reported, beside the problem of its duration.
#[test]
fn a_null_schedule_with_a_bad_duration_keeps_both_problems() {
    let text = "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  template: {}\n  disruption:\n    budgets:\n      - {nodes: \"0\", schedule: null, duration: 99999999999h}\n";
    let (code, _, stderr) = validate(&["-"], text);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("longer than 10 years") && stderr.contains("schedule"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 3, "{stderr}");
}

/// A refused command prints its error and causes, never a stack backtrace, even with
/// `RUST_BACKTRACE=1` in the environment (anyhow would capture one): here `crds --dir DIR`
/// under a regular file, whose cause is the operating system's.
#[test]
fn errors_print_their_causes_but_no_backtrace() {
    let file = std::env::temp_dir().join(format!("gpu-autoscaler-bt-{}", std::process::id()));
    std::fs::write(&file, "not a directory").expect("write the temporary file");
    let target = file.join("crds");
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .args(["crds", "--dir"])
        .arg(&target)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run gpu-autoscaler");
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let first = format!("Error: creating {}\n\nCaused by:\n    ", target.display());
    assert!(stderr.starts_with(&first), "{stderr}");
    assert_eq!(stderr.lines().count(), 4, "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
}
