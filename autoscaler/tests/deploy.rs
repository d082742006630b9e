//! The deploy bundle: the Helm chart under `deploy/charts/gpu-autoscaler`, and the plain
//! manifests `deploy/manifests/gpu-autoscaler.yaml` rendered from it.
//!
//! No `helm` binary is available here, so the chart's templates keep to a small subset of the
//! template language that [`render`] implements exactly: `{{ .Values.a.b }}`,
//! `{{ .Release.Namespace }}`, `{{ .Release.Name }}`, and whole-line
//! `{{- if .Values.x }}` / `{{- if eq .Values.x "v" }}` ... `{{- end }}` blocks. Any other
//! construct fails the test, so the subset cannot drift.
//!
//! The RBAC test parses the rendered ClusterRole and Role and compares them, rule by rule, with
//! `autoscaler::controller::api_calls::API_CALLS`, the list every API call of the controller is
//! checked against: the ServiceAccount may do exactly what the controller does.
//!
//! Regenerate the committed files with `UPDATE_MANIFESTS=1 cargo test -p autoscaler --test deploy`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use autoscaler::controller::api_calls::{Scope, triples};
use serde_yaml::Value;

const NAMESPACE: &str = "gpu-autoscaler";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    root().join("deploy/charts/gpu-autoscaler")
}

fn lookup<'a>(values: &'a Value, path: &str) -> &'a Value {
    let mut v = values;
    for part in path.split('.') {
        v = v
            .get(part)
            .unwrap_or_else(|| panic!("values have no {path}"));
    }
    v
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("only scalars may be substituted, got {other:?}"),
    }
}

fn eval(expr: &str, values: &Value) -> String {
    match expr {
        ".Release.Namespace" => NAMESPACE.into(),
        ".Release.Name" => "gpu-autoscaler".into(),
        e if e.starts_with(".Values.") => scalar(lookup(values, &e[".Values.".len()..])),
        e => panic!("template construct outside the supported subset: {{{{ {e} }}}}"),
    }
}

fn condition(expr: &str, values: &Value) -> bool {
    let parts: Vec<&str> = expr.split_whitespace().collect();
    match parts.as_slice() {
        ["eq", path, lit] => eval(path, values) == lit.trim_matches('"'),
        [path] => match lookup(values, &path[".Values.".len()..]) {
            Value::Bool(b) => *b,
            Value::Null => false,
            Value::String(s) => !s.is_empty(),
            _ => true,
        },
        _ => panic!("unsupported condition {expr:?}"),
    }
}

/// Renders one template with `values`.
fn render(template: &str, values: &Value) -> String {
    let mut out = String::new();
    let mut active: Vec<bool> = Vec::new();
    for line in template.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("{{- if ").and_then(|r| r.strip_suffix("}}")) {
            active.push(condition(rest.trim(), values));
            continue;
        }
        if t == "{{- end }}" {
            active.pop().expect("balanced if/end");
            continue;
        }
        if !active.iter().all(|a| *a) {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").expect("closed {{") + start;
            out.push_str(&eval(rest[start + 2..end].trim(), values));
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out.push('\n');
    }
    assert!(active.is_empty(), "unbalanced if/end");
    out
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

fn default_values() -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap()).unwrap()
}

/// The whole bundle: a Namespace, the chart's CRDs, then its rendered templates.
fn render_chart(values: &Value) -> String {
    let mut out = String::from(
        "# Generated: deploy/charts/gpu-autoscaler rendered with its default values, release\n\
         # gpu-autoscaler in namespace gpu-autoscaler. Do not edit; regenerate with\n\
         # `UPDATE_MANIFESTS=1 cargo test -p autoscaler --test deploy`.\n",
    );
    out.push_str(&format!(
        "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"
    ));
    for f in sorted_files(&chart().join("crds")) {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        out.push_str(&format!("---\n# Source: gpu-autoscaler/crds/{name}\n"));
        let text = std::fs::read_to_string(&f).unwrap();
        out.push_str(text.trim_start_matches("---\n"));
    }
    for f in sorted_files(&chart().join("templates")) {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let text = render(&std::fs::read_to_string(&f).unwrap(), values);
        for doc in text.split("\n---\n") {
            out.push_str(&format!("---\n# Source: gpu-autoscaler/templates/{name}\n"));
            out.push_str(doc.trim_start_matches("---\n").trim_end());
            out.push('\n');
        }
    }
    out
}

fn docs(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Keeps the chart's CRDs and the plain manifests in sync with their sources.
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
    let manifest = root().join("deploy/manifests/gpu-autoscaler.yaml");
    let rendered = render_chart(&default_values());
    if update {
        std::fs::write(&manifest, &rendered).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&manifest).unwrap_or_default(),
        rendered,
        "deploy/manifests/gpu-autoscaler.yaml is stale: run UPDATE_MANIFESTS=1 cargo test -p autoscaler --test deploy"
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

fn check_rbac(values: &Value, kwok: bool) {
    let d = docs(&render_chart(values));
    let want = |scope| triples(kwok, scope).into_iter().collect::<BTreeSet<_>>();
    let cluster = rbac(&d, "ClusterRole");
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
    let ns = rbac(&d, "Role");
    assert_eq!(ns, want(Scope::OwnNamespace), "Role (leader election)");
    // Every Role lives in the release namespace.
    for r in d.iter().filter(|d| d["kind"] == "Role") {
        assert_eq!(r["metadata"]["namespace"], NAMESPACE);
    }
}

/// The rendered RBAC covers every API call the controller makes and nothing more, for each
/// provider.
#[test]
fn rbac_matches_the_controllers_api_calls() {
    check_rbac(&default_values(), true);
    let mut fake = default_values();
    fake["provider"] = Value::String("fake".into());
    check_rbac(&fake, false);
}

/// Two replicas with leader election, non-root, read-only root filesystem, a PDB for itself.
#[test]
fn deployment_is_hardened_and_highly_available() {
    let d = docs(&render_chart(&default_values()));
    let dep = d
        .iter()
        .find(|x| x["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
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
    assert_eq!(pdb["spec"]["minAvailable"], 1);
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

/// The subset renderer itself.
#[test]
fn renderer_subset() {
    let values: Value = serde_yaml::from_str("a: {b: 3}\np: kwok\nflag: false\n").unwrap();
    let t = "x: {{ .Values.a.b }}\n{{- if eq .Values.p \"kwok\" }}\nk: 1\n{{- end }}\n{{- if .Values.flag }}\nf: 1\n{{- end }}\nns: {{ .Release.Namespace }}\n";
    assert_eq!(render(t, &values), "x: 3\nk: 1\nns: gpu-autoscaler\n");
}
