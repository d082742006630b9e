//! The deploy bundle: the Helm chart under `deploy/charts/gpu-autoscaler`, the plain manifests
//! `deploy/manifests/gpu-autoscaler.yaml` rendered from it, the alert rules and dashboard it
//! ships, and the `Dockerfile` of the image it runs.
//!
//! The chart is rendered by a real `helm` (`$GPU_AUTOSCALER_HELM`, else `helm` on `PATH`;
//! `.ci/run` installs one). Without it, the tests that must render with other values say
//! `skipped` and pass; the checks that need no rendering run on the committed manifest, which
//! is the chart rendered with its defaults (kept equal to a fresh rendering when helm is
//! present). Kubernetes schema validation of the rendered objects uses `kubernetes-validate`
//! (`$GPU_AUTOSCALER_KUBE_VALIDATE`, else on `PATH`) the same way.
//!
//! Every argument the chart passes is parsed with the binary's own `RunArgs`, so a misspelt
//! flag or a value the binary rejects fails here rather than in a crash-looping pod.
//!
//! The RBAC test parses the rendered ClusterRole and Role and compares them, rule by rule, with
//! `autoscaler::controller::api_calls::API_CALLS`, the list every API call of the controller is
//! checked against: the ServiceAccount may do exactly what the controller does.
//!
//! Regenerate the committed files with `UPDATE_MANIFESTS=1 cargo test -p autoscaler --test deploy`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use autoscaler::controller::api_calls::{Scope, triples};
use autoscaler::controller::settings::{ProviderKind, RunArgs};
use serde_norway::Value;

const NAMESPACE: &str = "gpu-autoscaler";
const RELEASE: &str = "gpu-autoscaler";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    root().join("deploy/charts/gpu-autoscaler")
}

#[path = "support/tools.rs"]
mod tools;
use tools::tool;

fn helm() -> Option<PathBuf> {
    tool("GPU_AUTOSCALER_HELM", "helm")
}

/// Returns from the test, saying so, when helm is not installed.
macro_rules! need_helm {
    () => {
        match helm() {
            Some(h) => h,
            None => {
                eprintln!(
                    "skipped: helm not found (set GPU_AUTOSCALER_HELM or put helm on PATH; .ci/run installs it)"
                );
                return;
            }
        }
    };
}

/// Runs helm with `args`; `Err` carries its stderr.
fn run_helm(helm: &Path, args: &[&str]) -> Result<String, String> {
    let out = Process::new(helm)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm.display()));
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("helm prints UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `helm template` of the chart as release `release` in [`NAMESPACE`] with `overrides` (a
/// values file's text; empty for the defaults), CRDs included.
fn try_render(helm: &Path, release: &str, overrides: &str) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, overrides).unwrap();
    let chart = chart();
    run_helm(
        helm,
        &[
            "template",
            release,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--include-crds",
            "-f",
            values.to_str().unwrap(),
        ],
    )
}

fn render_chart(helm: &Path, overrides: &str) -> String {
    try_render(helm, RELEASE, overrides)
        .unwrap_or_else(|e| panic!("helm template with {overrides:?} failed:\n{e}"))
}

/// The committed plain manifest: a Namespace, then the chart rendered with its defaults.
fn manifest() -> String {
    std::fs::read_to_string(root().join("deploy/manifests/gpu-autoscaler.yaml"))
        .expect("deploy/manifests/gpu-autoscaler.yaml")
}

fn manifest_text(rendered: &str) -> String {
    format!(
        "# Generated: deploy/charts/gpu-autoscaler rendered by helm with its default values,\n\
         # release {RELEASE} in namespace {NAMESPACE}. Do not edit; regenerate with\n\
         # `UPDATE_MANIFESTS=1 cargo test -p autoscaler --test deploy`.\n\
         ---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n{rendered}"
    )
}

fn docs(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn sorted_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Keeps the chart's CRDs in sync with `deploy/crds` and the kwok CRD, and (with helm) the
/// plain manifest with a fresh rendering.
#[test]
fn chart_crds_and_rendered_manifests_are_up_to_date() {
    let update = std::env::var_os("UPDATE_MANIFESTS").is_some();
    let mut expected: Vec<(PathBuf, String)> = sorted_files(&root().join("deploy/crds"))
        .into_iter()
        .map(|f| {
            (
                chart().join("crds").join(f.file_name().unwrap()),
                std::fs::read_to_string(&f).unwrap(),
            )
        })
        .collect();
    expected.push((
        chart().join("crds/kwok.gpu-autoscaler.dev_kwokinstances.yaml"),
        format!(
            "# The kwok provider's instance table; generated from providers::kwok::CRD_YAML.\n{}",
            providers::kwok::CRD_YAML
        ),
    ));
    for (path, content) in &expected {
        if update {
            std::fs::write(path, content).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(path).unwrap_or_default(),
            *content,
            "{} is stale: run UPDATE_MANIFESTS=1 cargo test -p autoscaler --test deploy",
            path.display()
        );
    }
    let helm = need_helm!();
    let rendered = manifest_text(&render_chart(&helm, ""));
    if update {
        std::fs::write(
            root().join("deploy/manifests/gpu-autoscaler.yaml"),
            &rendered,
        )
        .unwrap();
    }
    assert_eq!(
        manifest(),
        rendered,
        "deploy/manifests/gpu-autoscaler.yaml is stale: run UPDATE_MANIFESTS=1 cargo test -p autoscaler --test deploy"
    );
}

/// `helm lint --strict` passes with the defaults and with each example values file.
#[test]
fn chart_lints_strictly() {
    let helm = need_helm!();
    let chart = chart();
    run_helm(&helm, &["lint", "--strict", chart.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("helm lint --strict:\n{e}"));
    for (name, values) in example_values() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("values.yaml");
        std::fs::write(&f, &values).unwrap();
        run_helm(
            &helm,
            &[
                "lint",
                "--strict",
                chart.to_str().unwrap(),
                "-f",
                f.to_str().unwrap(),
            ],
        )
        .unwrap_or_else(|e| panic!("helm lint --strict -f {name}:\n{e}"));
    }
}

/// The values files users start from: the README's install snippets, and every optional
/// object turned on.
fn example_values() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = readme_snippets()
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("README snippet {i}"), s))
        .collect();
    out.push((
        "monitoring".into(),
        "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\ndashboard: {enabled: true}\n"
            .into(),
    ));
    out.push((
        "scheduling".into(),
        "replicas: 1\ntolerations: [{key: CriticalAddonsOnly, operator: Exists}]\n\
         topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
         whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app.kubernetes.io/name: gpu-autoscaler}}}]\n\
         podAnnotations: {example.com/team: ml}\nimagePullSecrets: [{name: regcred}]\n\
         env: [{name: AWS_STS_REGIONAL_ENDPOINTS, value: regional}]\n"
            .into(),
    ));
    out
}

/// Every object of every example rendering passes Kubernetes' schema (strict: no unknown
/// fields), except the Prometheus Operator's kinds, which the validator has no schema for.
#[test]
fn rendered_objects_pass_kubernetes_schema_validation() {
    let helm = need_helm!();
    let Some(validator) = tool("GPU_AUTOSCALER_KUBE_VALIDATE", "kubernetes-validate") else {
        eprintln!(
            "skipped: kubernetes-validate not found (pip install kubernetes-validate; .ci/run installs it)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut sets = example_values();
    sets.push(("defaults".into(), String::new()));
    for (name, values) in sets {
        let rendered = render_chart(&helm, &values);
        let file = dir.path().join("rendered.yaml");
        std::fs::write(&file, &rendered).unwrap();
        let out = Process::new(&validator)
            .args(["--strict", "--quiet", "-k", "1.34.0"])
            .arg(&file)
            .output()
            .expect("running kubernetes-validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let problems: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter(|l| !l.contains("Couldn't find schema for kind PrometheusRule"))
            .filter(|l| !l.contains("Couldn't find schema for kind ServiceMonitor"))
            .collect();
        assert!(
            out.status.success() && problems.is_empty(),
            "{name}: schema validation failed:\n{text}"
        );
    }
}

/// A cloud provider without its settings file, an unknown value and a malformed duration are
/// refused when rendering, naming what is wrong, instead of failing in the pod.
#[test]
fn render_refuses_what_would_fail_at_start() {
    let helm = need_helm!();
    for (values, want) in [
        ("provider: aws\n", "provider \"aws\" needs providerConfig"),
        ("provider: gcp\n", "provider \"gcp\" needs providerConfig"),
        ("gpuUtilisationThreshold: 0.5\n", "gpuUtilisationThreshold"),
        ("batchIdle: soon\n", "/batchIdle"),
        ("provider: azure\n", "/provider"),
        ("resources: {cpu: 100m}\n", "cpu"),
    ] {
        let err = try_render(&helm, RELEASE, values).expect_err(&format!("{values:?} rendered"));
        assert!(err.contains(want), "{values:?}: {err}");
    }
}

/// Two releases in one cluster do not collide: every cluster-scoped object and every object in
/// the namespace is named after its release, and each Deployment selects only its own pods.
#[test]
fn two_releases_get_distinct_names_and_selectors() {
    let helm = need_helm!();
    let names = |release: &str| -> (BTreeSet<(String, String)>, Value) {
        let d = docs(&try_render(&helm, release, "").unwrap());
        let dep = d
            .iter()
            .find(|x| x["kind"] == "Deployment")
            .cloned()
            .unwrap();
        (
            d.iter()
                .filter(|x| x["kind"] != "CustomResourceDefinition")
                .map(|x| {
                    (
                        x["kind"].as_str().unwrap().to_string(),
                        x["metadata"]["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            dep,
        )
    };
    let (blue, blue_dep) = names("blue");
    let (green, green_dep) = names("green");
    assert!(
        blue.is_disjoint(&green),
        "shared names: {:?}",
        blue.intersection(&green).collect::<Vec<_>>()
    );
    assert!(blue.contains(&("Deployment".into(), "blue-gpu-autoscaler".into())));
    assert_ne!(
        blue_dep["spec"]["selector"], green_dep["spec"]["selector"],
        "the selectors must not overlap"
    );
    // Each release elects its own leader.
    let lease = |dep: &Value| {
        dep["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .find_map(|a| {
                a.as_str()
                    .unwrap()
                    .strip_prefix("--lease-name=")
                    .map(String::from)
            })
            .expect("--lease-name")
    };
    assert_ne!(lease(&blue_dep), lease(&green_dep));
}

/// The PDB exists only where it cannot block a drain: with one replica there is none, with two
/// it allows one disruption and never protects an unhealthy pod.
#[test]
fn pdb_only_with_more_than_one_replica() {
    let helm = need_helm!();
    let one = docs(&render_chart(&helm, "replicas: 1\n"));
    assert!(!one.iter().any(|x| x["kind"] == "PodDisruptionBudget"));
    let two = docs(&render_chart(&helm, "replicas: 2\n"));
    let pdb = two
        .iter()
        .find(|x| x["kind"] == "PodDisruptionBudget")
        .expect("a PDB with two replicas");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
}

/// A changed provider settings file changes the pod template, so `helm upgrade` rolls the pods
/// (the controller reads the file at start-up only).
#[test]
fn provider_config_change_rolls_the_pods() {
    let helm = need_helm!();
    let checksum = |config: &str| {
        let d = docs(&render_chart(
            &helm,
            &with_config("provider: aws\n", config),
        ));
        d.iter().find(|x| x["kind"] == "Deployment").unwrap()["spec"]["template"]["metadata"]
            ["annotations"]["checksum/provider-config"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_ne!(
        checksum("region: us-west-2\n"),
        checksum("region: eu-west-1\n")
    );
    assert_eq!(
        checksum("region: us-west-2\n"),
        checksum("region: us-west-2\n")
    );
}

/// Every value the schema allows is in values.yaml and every value of values.yaml is in the
/// schema: an unknown value is refused, never silently ignored.
#[test]
fn values_schema_covers_exactly_the_values() {
    let values: Value =
        serde_norway::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    assert_eq!(schema["additionalProperties"], false);
    let in_schema: BTreeSet<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let in_values: BTreeSet<String> = values
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(in_schema, in_values);
}

/// The metric names a text (PromQL of alerts and dashboard panels) refers to.
fn series_named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("gpu_autoscaler_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Every series the alert rules and the dashboard use is exported by the controller, under
/// the names Prometheus gives it (`_total` for counters, `_bucket`/`_sum`/`_count` for
/// histograms).
#[test]
fn alerts_and_dashboard_use_only_exported_series() {
    let exported = autoscaler::controller::metrics::Metrics::with_every_family().render();
    let mut names = BTreeSet::new();
    for line in exported.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (name, kind) = (it.next().unwrap(), it.next().unwrap());
            match kind {
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for s in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{s}"));
                    }
                }
                _ => {
                    names.insert(name.to_string());
                }
            }
        }
    }
    assert!(names.len() > 15, "{exported}");
    let alerts = std::fs::read_to_string(chart().join("files/alerts.yaml")).unwrap();
    let rules: Value = serde_norway::from_str(&alerts).unwrap();
    let mut alert_names = BTreeSet::new();
    for rule in rules["groups"][0]["rules"].as_sequence().unwrap() {
        alert_names.insert(rule["alert"].as_str().unwrap().to_string());
        assert!(rule["expr"].as_str().is_some_and(|e| !e.is_empty()));
    }
    for want in [
        "GpuAutoscalerLoopStalled",
        "GpuAutoscalerPodsPendingTooLong",
        "GpuAutoscalerLaunchFailures",
        "GpuAutoscalerLaunchesWithoutBinds",
    ] {
        assert!(alert_names.contains(want), "{want} missing");
    }
    let dashboard = std::fs::read_to_string(chart().join("files/dashboard.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let exprs: Vec<String> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() > 10);
    for (what, text) in [
        ("alerts.yaml", alerts),
        ("dashboard.json", exprs.join("\n")),
    ] {
        let used = series_named(&text);
        assert!(!used.is_empty());
        let unknown: Vec<_> = used.difference(&names).collect();
        assert!(
            unknown.is_empty(),
            "{what} uses series never exported: {unknown:?}"
        );
    }
    // Every exported family is on the dashboard, so nothing the controller measures is hidden.
    let on_dashboard = series_named(&d.to_string());
    let families: BTreeSet<String> = exported
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|r| r.split_whitespace().next().unwrap().to_string())
        .collect();
    let hidden: Vec<_> = families
        .iter()
        .filter(|f| !on_dashboard.iter().any(|u| u.starts_with(f.as_str())))
        .collect();
    assert!(
        hidden.is_empty(),
        "families not on the dashboard: {hidden:?}"
    );
}

/// The image and the chart agree: the Dockerfile's final stage runs the `gpu-autoscaler`
/// binary as the uid and gid the chart's securityContext demands, exposes the metrics port the
/// chart probes, and the chart's first argument is a subcommand of that binary.
#[test]
fn image_agrees_with_the_chart() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let last_stage = dockerfile
        .rsplit_once("\nFROM ")
        .map(|(_, s)| s)
        .expect("a multi-stage Dockerfile");
    let directive = |name: &str| -> Vec<String> {
        last_stage
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{name} ")))
            .map(|s| s.trim().to_string())
            .collect()
    };
    let d = docs(&manifest());
    let pod = &d.iter().find(|x| x["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"];
    let uid = pod["securityContext"]["runAsUser"].as_u64().unwrap();
    let gid = pod["securityContext"]["runAsGroup"].as_u64().unwrap();
    assert_eq!(directive("USER"), [format!("{uid}:{gid}")]);
    let entry: Vec<String> = serde_json::from_str(&directive("ENTRYPOINT")[0]).unwrap();
    assert_eq!(entry, ["/usr/local/bin/gpu-autoscaler"]);
    assert!(
        last_stage.contains("/usr/local/bin/gpu-autoscaler"),
        "the binary is copied where the entrypoint names it"
    );
    let c = &pod["containers"][0];
    let port = c["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(directive("EXPOSE"), [format!("{port}/tcp")]);
    assert_eq!(c["args"][0], "run");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    // The binary the image builds is the package's `gpu-autoscaler`, with every cloud provider.
    let build = dockerfile_build_command(&dockerfile);
    assert!(
        build.starts_with("cargo build --release --locked -p autoscaler ")
            && build.contains(" --features aws,gcp ")
            && build.ends_with(" --bin gpu-autoscaler"),
        "{build}"
    );
}

/// The `cargo build` command of the Dockerfile's build stage.
fn dockerfile_build_command(dockerfile: &str) -> String {
    let start = dockerfile
        .find("cargo build ")
        .expect("the Dockerfile runs cargo build");
    // The command ends at `&&` or at the line's continuation backslash.
    let line = dockerfile[start..].lines().next().unwrap();
    let command = line.split("&&").next().unwrap().trim();
    command.trim_end_matches('\\').trim_end().to_string()
}

/// A fresh clone builds the image's binary in CI: `.ci/run` runs the Dockerfile's very `cargo
/// build` command (same package, features and profile), and the README's test command, which
/// enables every feature so that the AWS and GCP tests run.
#[test]
fn ci_builds_the_images_binary_and_runs_the_readmes_tests() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let ci_lines: Vec<&str> = ci.lines().map(str::trim).collect();
    let build = dockerfile_build_command(&dockerfile);
    assert!(
        ci_lines.contains(&build.as_str()),
        ".ci/run does not run the Dockerfile's `{build}`"
    );
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let test = readme
        .split("```sh\n")
        .filter_map(|b| b.split("```").next())
        .flat_map(str::lines)
        .find(|l| l.starts_with("cargo test"))
        .expect("the README's test command");
    assert_eq!(test, "cargo test --workspace --all-features");
    assert!(
        ci_lines
            .iter()
            .any(|l| *l == test || l.starts_with(&format!("{test} "))),
        ".ci/run does not run the README's `{test}`"
    );
}

fn rbac(docs: &[Value], kind: &str) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for d in docs.iter().filter(|d| d["kind"] == kind) {
        for rule in d["rules"].as_sequence().expect("rules") {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_sequence()
                    .unwrap_or_else(|| panic!("rule without {k}"))
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            assert!(rule.get("resourceNames").is_none() || kind == "Role");
            for g in list("apiGroups") {
                for r in list("resources") {
                    for v in list("verbs") {
                        assert!(
                            g != "*" && r != "*" && v != "*",
                            "wildcard in {kind} rule {rule:?}"
                        );
                        assert!(!r.starts_with("secrets"), "{kind} grants secrets");
                        out.insert((g.clone(), r.clone(), v));
                    }
                }
            }
        }
    }
    out
}

fn check_rbac(d: &[Value], kwok: bool) {
    let want = |scope| triples(kwok, scope).into_iter().collect::<BTreeSet<_>>();
    let cluster = rbac(d, "ClusterRole");
    let missing: Vec<_> = want(Scope::Cluster).difference(&cluster).cloned().collect();
    let extra: Vec<_> = cluster.difference(&want(Scope::Cluster)).cloned().collect();
    assert!(
        missing.is_empty(),
        "ClusterRole misses calls the controller makes: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "ClusterRole grants calls the controller never makes: {extra:?}"
    );
    let ns = rbac(d, "Role");
    assert_eq!(ns, want(Scope::OwnNamespace), "Role (leader election)");
    // Every Role lives in the release namespace.
    for r in d.iter().filter(|d| d["kind"] == "Role") {
        assert_eq!(r["metadata"]["namespace"], NAMESPACE);
    }
}

/// The rendered RBAC covers every API call the controller makes and nothing more: the
/// committed manifest (kwok), and with helm the fake provider's rendering.
#[test]
fn rbac_matches_the_controllers_api_calls() {
    check_rbac(&docs(&manifest()), true);
    let helm = need_helm!();
    check_rbac(&docs(&render_chart(&helm, "provider: fake\n")), false);
}

/// Two replicas with leader election, non-root, read-only root filesystem, a PDB for itself,
/// system-cluster-critical, and kept off the nodes it manages.
#[test]
fn deployment_is_hardened_and_highly_available() {
    let d = docs(&manifest());
    let dep = d
        .iter()
        .find(|x| x["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let term = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        [0]["matchExpressions"][0];
    assert_eq!(term["key"], autoscaler_core::labels::NODEPOOL);
    assert_eq!(term["operator"], "DoesNotExist");
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--leader-elect=true"));
    assert!(args.contains(&"--provider=kwok"));
    assert!(args.contains(&"--region=us-east-1"));
    let pdb = d
        .iter()
        .find(|x| x["kind"] == "PodDisruptionBudget")
        .expect("a PDB");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    // Every CRD the controller reads is installed.
    let crds: BTreeSet<&str> = d
        .iter()
        .filter(|x| x["kind"] == "CustomResourceDefinition")
        .map(|x| x["metadata"]["name"].as_str().unwrap())
        .collect();
    for name in [
        "nodepools.gpu-autoscaler.dev",
        "nodeclaims.gpu-autoscaler.dev",
        "kwokinstances.kwok.gpu-autoscaler.dev",
    ] {
        assert!(crds.contains(name), "{name} missing");
    }
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn container(docs: &[Value]) -> &Value {
    &find(docs, "Deployment", "gpu-autoscaler").expect("the Deployment")["spec"]["template"]["spec"]
        ["containers"][0]
}

fn args(docs: &[Value]) -> Vec<String> {
    container(docs)["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string args").to_string())
        .collect()
}

/// The binary's command line, as `src/main.rs` declares it: `gpu-autoscaler run` with
/// [`RunArgs`], the very parser the container's arguments meet.
#[derive(clap::Parser)]
#[command(name = "gpu-autoscaler")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Run(RunArgs),
}

fn parse_run(args: &[String]) -> Result<RunArgs, clap::Error> {
    use clap::Parser as _;
    let argv = std::iter::once("gpu-autoscaler".to_string()).chain(args.iter().cloned());
    Cli::try_parse_from(argv).map(|c| match c.command {
        Command::Run(r) => r,
    })
}

/// Parses the rendered arguments, failing with clap's message (which names the bad flag).
fn run_args(docs: &[Value]) -> RunArgs {
    let a = args(docs);
    parse_run(&a).unwrap_or_else(|e| panic!("the chart's args {a:?} do not parse:\n{e}"))
}

/// Where the container finds the provider settings file: the mount of the volume that holds the
/// ConfigMap, joined with the ConfigMap's only key; and that file's text.
fn mounted_settings(docs: &[Value]) -> (String, String) {
    let cm = find(docs, "ConfigMap", "gpu-autoscaler-provider").expect("the settings ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], NAMESPACE);
    let data = cm["data"].as_mapping().expect("data");
    assert_eq!(data.len(), 1, "one file");
    let (key, text) = data.iter().next().unwrap();
    let pod = &find(docs, "Deployment", "gpu-autoscaler").unwrap()["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_sequence()
        .expect("volumes")
        .iter()
        .find(|v| v["configMap"]["name"] == "gpu-autoscaler-provider")
        .expect("a volume of the ConfigMap");
    let mount = container(docs)["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the volume mounted");
    assert_eq!(mount["readOnly"], true);
    (
        format!(
            "{}/{}",
            mount["mountPath"].as_str().unwrap(),
            key.as_str().unwrap()
        ),
        text.as_str().unwrap().to_string(),
    )
}

/// The settings text as the binary would read it from the mount: written to a temporary file
/// that stands in for the mounted path.
#[cfg(any(feature = "aws", feature = "gcp"))]
fn local_copy(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Value overrides with the provider settings file `config` added as `providerConfig`.
fn with_config(overrides: &str, config: &str) -> String {
    let mut v: Value = serde_norway::from_str(overrides).unwrap();
    v["providerConfig"] = Value::String(config.to_string());
    serde_norway::to_string(&v).unwrap()
}

const AWS_VALUES: &str = "
provider: aws
region: us-west-2
clusterName: prod
serviceAccount:
  annotations:
    eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/gpu-autoscaler
";

const GCP_VALUES: &str = "
provider: gcp
region: us-central1
project: ml-prod
zones: [us-central1-a, us-central1-b]
serviceAccount:
  annotations:
    iam.gke.io/gcp-service-account: gpu-autoscaler@ml-prod.iam.gserviceaccount.com
";

/// AWS: the settings file reaches the binary through a ConfigMap, a read-only mount and
/// `--aws-config`, and the binary's own loader accepts it; IRSA's role annotation is on the
/// pod's ServiceAccount.
#[test]
fn aws_values_mount_the_settings_file_and_annotate_for_irsa() {
    let config = provider_aws::config::EXAMPLE_SETTINGS;
    let helm = need_helm!();
    let d = docs(&render_chart(&helm, &with_config(AWS_VALUES, config)));
    let (path, text) = mounted_settings(&d);
    assert_eq!(text, config);
    let a = args(&d);
    assert!(a.contains(&format!("--aws-config={path}")), "{a:?}");
    assert!(a.contains(&"--provider=aws".to_string()));
    assert!(a.contains(&"--region=us-west-2".to_string()));
    assert!(!a.iter().any(|x| x.starts_with("--gcp-config")
        || x.starts_with("--project")
        || x.starts_with("--zone")));
    let run = run_args(&d);
    assert_eq!(run.aws.config.as_deref(), Some(Path::new(&path)));
    // The loader is the `aws` feature's (CI tests with --all-features).
    #[cfg(feature = "aws")]
    {
        let (_dir, local) = local_copy(&text);
        let mut run = run.clone();
        run.aws.config = Some(local);
        let s = run
            .aws
            .settings(Some(&run.region), Some(&run.cluster_name))
            .expect("the binary loads the mounted settings");
        assert_eq!(s.region.as_deref(), Some("us-west-2"), "--region wins");
        assert_eq!(s.cluster, "prod");
        assert!(!s.node_classes["default"].ami.is_empty(), "an AMI");
    }
    let sa = find(&d, "ServiceAccount", "gpu-autoscaler").expect("the ServiceAccount");
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/gpu-autoscaler"
    );
    let pod = &find(&d, "Deployment", "gpu-autoscaler").unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
}

/// GCP: the settings file through `--gcp-config`, the project and every zone as flags that win
/// over the file, and workload identity's annotation.
#[test]
fn gcp_values_pass_project_zones_and_the_settings_file() {
    let config =
        std::fs::read_to_string(root().join("providers/gcp/settings.example.yaml")).unwrap();
    let helm = need_helm!();
    let d = docs(&render_chart(&helm, &with_config(GCP_VALUES, &config)));
    let (path, text) = mounted_settings(&d);
    assert_eq!(text, config);
    let a = args(&d);
    assert!(a.contains(&format!("--gcp-config={path}")), "{a:?}");
    for want in [
        "--provider=gcp",
        "--region=us-central1",
        "--project=ml-prod",
        "--zone=us-central1-a",
        "--zone=us-central1-b",
    ] {
        assert!(a.contains(&want.to_string()), "{want} missing from {a:?}");
    }
    assert!(!a.iter().any(|x| x.starts_with("--aws-config")));
    let run = run_args(&d);
    assert_eq!(run.gcp.config.as_deref(), Some(Path::new(&path)));
    assert_eq!(run.gcp.project.as_deref(), Some("ml-prod"));
    assert_eq!(run.gcp.zones, ["us-central1-a", "us-central1-b"]);
    // The loader is the `gcp` feature's (CI tests with --all-features).
    #[cfg(feature = "gcp")]
    {
        let (_dir, local) = local_copy(&text);
        let mut run = run.clone();
        run.gcp.config = Some(local);
        let s = run
            .gcp
            .settings(autoscaler::gcp::Common {
                cluster: Some(&run.cluster_name),
                region: Some(&run.region),
                endpoint_url: run.aws.endpoint_url.as_deref(),
            })
            .expect("the binary loads the mounted settings");
        assert_eq!(s.project, "ml-prod", "--project wins over the file");
        assert_eq!(s.zones, ["us-central1-a", "us-central1-b"]);
        assert!(s.node_classes.contains_key("default"));
    }
    let sa = find(&d, "ServiceAccount", "gpu-autoscaler").unwrap();
    assert_eq!(
        sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"],
        "gpu-autoscaler@ml-prod.iam.gserviceaccount.com"
    );
}

/// The default (kwok) install has no settings file, no mount and no annotations.
#[test]
fn default_values_render_no_provider_file() {
    let d = docs(&manifest());
    assert!(find(&d, "ConfigMap", "gpu-autoscaler-provider").is_none());
    assert!(container(&d).get("volumeMounts").is_none());
    let sa = find(&d, "ServiceAccount", "gpu-autoscaler").unwrap();
    assert!(sa["metadata"].get("annotations").is_none());
    assert!(!args(&d).iter().any(|a| a.contains("-config=")));
}

/// Every argument the chart can emit parses with the binary's `RunArgs`: each value set below
/// turns on other conditional flags, and together they cover every flag the template names, so
/// a misspelt flag or an unparsable default fails here.
#[test]
fn every_argument_the_chart_can_emit_parses_with_the_binary() {
    let helm = need_helm!();
    let sets = [
        String::new(),
        "provider: fake\n".to_string(),
        "clusterLimits: {maxNodesTotal: 10, coresTotal: \"8:64\", memoryTotal: \"0:256\", gpuTotal: [\"H100:0:16\", \"L4:1:8\"]}\n".to_string(),
        with_config(
            &format!(
                "{AWS_VALUES}\nendpointUrl: http://127.0.0.1:5000\nextraArgs: [--namespace=blue]\n"
            ),
            "region: us-west-2\n",
        ),
        with_config(
            &format!("{GCP_VALUES}\nendpointUrl: http://127.0.0.1:8085\n"),
            "project: p\n",
        ),
    ];
    let mut seen = BTreeSet::new();
    for values in &sets {
        let d = docs(&render_chart(&helm, values));
        run_args(&d);
        for a in args(&d) {
            if let Some(flag) = a.split('=').next().filter(|f| f.starts_with("--")) {
                seen.insert(flag.to_string());
            }
        }
    }
    let template = std::fs::read_to_string(chart().join("templates/deployment.yaml")).unwrap();
    let named: BTreeSet<String> = template
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- --"))
        .map(|f| format!("--{}", f.split('=').next().unwrap()))
        .collect();
    assert!(named.len() > 30, "the scan found the flags: {named:?}");
    let uncovered: Vec<_> = named.difference(&seen).collect();
    assert!(
        uncovered.is_empty(),
        "flags no value set renders, so unchecked: {uncovered:?}"
    );
    // The check bites: a misspelt flag, and a flag extraArgs repeats, are rejected.
    for extra in ["[--provreq-bookin=1m]", "[--region=eu-west-1]"] {
        let d = docs(&render_chart(&helm, &format!("extraArgs: {extra}\n")));
        assert!(parse_run(&args(&d)).is_err(), "{extra} was accepted");
    }
}

/// The chart's defaults are the binary's, apart from the region and the log format, so the
/// generated manifest runs what `gpu-autoscaler run` documents.
#[test]
fn chart_defaults_are_the_binarys_defaults() {
    let mut chart = run_args(&docs(&manifest()));
    let binary = parse_run(&["run".to_string()]).unwrap();
    assert_eq!(chart.region, "us-east-1");
    assert_eq!(
        chart.log_format,
        autoscaler::controller::settings::LogFormat::Json
    );
    chart.region = binary.region.clone();
    chart.log_format = binary.log_format;
    assert_eq!(format!("{chart:#?}"), format!("{binary:#?}"));
}

/// The install snippets of the README's "Install in a cluster" section render, every argument
/// parses, and the binary loads their settings files.
#[test]
fn readme_install_snippets_render_and_load() {
    let snippets = readme_snippets();
    let helm = need_helm!();
    let mut providers = BTreeSet::new();
    for snippet in &snippets {
        let d = docs(&render_chart(&helm, snippet));
        let run = run_args(&d);
        let (path, text) = mounted_settings(&d);
        assert!(!text.trim().is_empty(), "{snippet}: an empty settings file");
        // The loaders are the `aws` and `gcp` features' (CI tests with --all-features).
        #[cfg(any(feature = "aws", feature = "gcp"))]
        let (_dir, local) = local_copy(&text);
        match run.provider {
            ProviderKind::Aws => {
                assert_eq!(run.aws.config.as_deref(), Some(Path::new(&path)));
                #[cfg(feature = "aws")]
                {
                    let mut run = run.clone();
                    run.aws.config = Some(local);
                    let s = run
                        .aws
                        .settings(Some(&run.region), Some(&run.cluster_name))
                        .unwrap_or_else(|e| panic!("README AWS settings: {e}"));
                    assert!(!s.node_classes["default"].ami.is_empty());
                }
            }
            ProviderKind::Gcp => {
                assert_eq!(run.gcp.config.as_deref(), Some(Path::new(&path)));
                #[cfg(feature = "gcp")]
                {
                    let mut run = run.clone();
                    run.gcp.config = Some(local);
                    run.gcp
                        .settings(autoscaler::gcp::Common {
                            cluster: Some(&run.cluster_name),
                            region: Some(&run.region),
                            endpoint_url: None,
                        })
                        .unwrap_or_else(|e| panic!("README GCP settings: {e}"));
                }
            }
            other => panic!("README snippet for {other:?}"),
        }
        let sa = find(&d, "ServiceAccount", "gpu-autoscaler").unwrap();
        assert!(sa["metadata"]["annotations"].is_mapping(), "{snippet}");
        providers.insert(format!("{:?}", run.provider));
    }
    assert_eq!(
        providers.len(),
        2,
        "an AWS and a GCP snippet: {providers:?}"
    );
}

/// The YAML snippets of the README's "Install in a cluster" section.
fn readme_snippets() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Install in a cluster\n")
        .nth(1)
        .expect("the README's install section")
        .split("\n## ")
        .next()
        .unwrap()
        .to_string();
    section
        .split("```yaml\n")
        .skip(1)
        .map(|s| s.split("```").next().unwrap().to_string())
        .collect()
}
