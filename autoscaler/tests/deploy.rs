//! The deploy bundle: the Helm chart under `deploy/charts/gpu-autoscaler`, and the plain
//! manifests `deploy/manifests/gpu-autoscaler.yaml` rendered from it.
//!
//! No `helm` binary is available here, so the chart's templates keep to a small subset of the
//! template language that [`render`] implements exactly: `{{ .Values.a.b }}`,
//! `{{ .Release.Namespace }}`, `{{ .Release.Name }}`, `{{ . }}` and `{{ $v }}` inside a range,
//! `$.Values.a` anywhere, the pipeline `| quote`; and, alone on their line, `{{- if X }}` /
//! `{{- if eq X "v" }}`, `{{- range X }}` / `{{- range $k, $v := X }}` (lists in order, maps
//! in key order), `{{- end }}` and `{{- X | nindent N }}`. Any other construct fails the test,
//! so the subset cannot drift. Missing values fail too, where Helm would print `<no value>`.
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

/// One parsed piece of a template.
enum Node {
    /// A line, with `{{ pipeline }}` substitutions.
    Line(String),
    /// `{{- pipeline | nindent N }}` alone on its line.
    Nindent(String, usize),
    /// `{{- if condition }}` ... `{{- end }}`.
    If(String, Vec<Node>),
    /// `{{- range pipeline }}` or `{{- range $k, $v := pipeline }}` ... `{{- end }}`.
    Range {
        vars: Option<(String, String)>,
        over: String,
        body: Vec<Node>,
    },
}

/// An open block while parsing.
enum Open {
    Root,
    If(String),
    Range(Option<(String, String)>, String),
}

/// Splits a template into lines and blocks. Actions that trim whitespace (`{{-`) must be alone
/// on their line, where trimming the line break before them is what dropping the line does.
fn parse(template: &str) -> Vec<Node> {
    let mut stack: Vec<(Open, Vec<Node>)> = vec![(Open::Root, Vec::new())];
    for line in template.lines() {
        let t = line.trim();
        let Some(action) = t.strip_prefix("{{-") else {
            assert!(
                !line.contains("{{-") && !line.contains("-}}"),
                "whitespace trimming outside a whole-line action: {line:?}"
            );
            stack.last_mut().unwrap().1.push(Node::Line(line.to_string()));
            continue;
        };
        let action = action
            .strip_suffix("}}")
            .filter(|a| !a.contains("}}") && !a.ends_with('-'))
            .unwrap_or_else(|| panic!("a {{{{- line must hold exactly one action: {line:?}"))
            .trim();
        let node = if let Some(cond) = action.strip_prefix("if ") {
            stack.push((Open::If(cond.trim().to_string()), Vec::new()));
            continue;
        } else if let Some(r) = action.strip_prefix("range ") {
            let open = match r.split_once(":=") {
                Some((vars, over)) => {
                    let (k, v) = vars
                        .split_once(',')
                        .unwrap_or_else(|| panic!("range takes `$k, $v :=`: {line:?}"));
                    let var = |n: &str| {
                        let n = n.trim();
                        assert!(n.len() > 1 && n.starts_with('$'), "range variable {n:?}");
                        n.to_string()
                    };
                    Open::Range(Some((var(k), var(v))), over.trim().to_string())
                }
                None => Open::Range(None, r.trim().to_string()),
            };
            stack.push((open, Vec::new()));
            continue;
        } else if action == "end" {
            assert!(stack.len() > 1, "{{{{- end }}}} without if or range");
            match stack.pop().unwrap() {
                (Open::If(cond), body) => Node::If(cond, body),
                (Open::Range(vars, over), body) => Node::Range { vars, over, body },
                (Open::Root, _) => unreachable!(),
            }
        } else if let Some((pipeline, width)) = action.rsplit_once("| nindent ") {
            Node::Nindent(
                pipeline.trim().to_string(),
                width.trim().parse().expect("nindent width"),
            )
        } else {
            panic!("template construct outside the supported subset: {line:?}")
        };
        stack.last_mut().unwrap().1.push(node);
    }
    assert_eq!(stack.len(), 1, "unbalanced if/range/end");
    stack.pop().unwrap().1
}

/// What names resolve to: the values, `.` (the root outside `range`, the element inside, as in
/// Go templates, so `.Values` inside a range is an error there too; `$.Values` is not) and the
/// range variables.
#[derive(Clone)]
struct Ctx<'a> {
    values: &'a Value,
    dot: Option<Value>,
    vars: Vec<(String, Value)>,
}

/// Go's `%q` (Helm's `quote`) for the characters templates here meet.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => panic!("quote of a control character {c:?}"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn term(t: &str, scope: &Ctx) -> Value {
    if let Some(lit) = t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return Value::String(lit.to_string());
    }
    if t == "." {
        return scope
            .dot
            .clone()
            .expect("`.` outside range is the whole context");
    }
    if let Some(name) = t.strip_prefix('$').filter(|n| !n.starts_with('.')) {
        let var = format!("${name}");
        return scope
            .vars
            .iter()
            .rev()
            .find(|(n, _)| *n == var)
            .unwrap_or_else(|| panic!("undefined variable {var}"))
            .1
            .clone();
    }
    let path = match t.strip_prefix('$') {
        Some(p) => p,
        None => {
            assert!(
                scope.dot.is_none(),
                "inside range `.` is the element: write ${t}"
            );
            t
        }
    };
    match path {
        ".Release.Namespace" => NAMESPACE.into(),
        ".Release.Name" => "gpu-autoscaler".into(),
        p if p.starts_with(".Values.") => lookup(scope.values, &p[".Values.".len()..]).clone(),
        _ => panic!("template construct outside the supported subset: {{{{ {t} }}}}"),
    }
}

/// `term | quote`.
fn pipeline(expr: &str, scope: &Ctx) -> Value {
    let mut stages = expr.split('|').map(str::trim);
    let mut v = term(stages.next().unwrap(), scope);
    for f in stages {
        v = match f {
            "quote" => Value::String(quote(&scalar(&v))),
            _ => panic!("template function outside the supported subset: {f:?}"),
        };
    }
    v
}

/// Go templates' truth: false, 0, null and empty strings, lists and maps are false.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Sequence(s) => !s.is_empty(),
        Value::Mapping(m) => !m.is_empty(),
        Value::Tagged(_) => true,
    }
}

fn condition(expr: &str, scope: &Ctx) -> bool {
    let parts: Vec<&str> = expr.split_whitespace().collect();
    match parts.as_slice() {
        ["eq", a, b] => scalar(&term(a, scope)) == scalar(&term(b, scope)),
        [t] => truthy(&term(t, scope)),
        _ => panic!("unsupported condition {expr:?}"),
    }
}

fn emit(nodes: &[Node], scope: &Ctx, out: &mut String) {
    for node in nodes {
        match node {
            Node::Line(line) => {
                let mut rest = line.as_str();
                while let Some(start) = rest.find("{{") {
                    out.push_str(&rest[..start]);
                    let end = rest[start..].find("}}").expect("closed {{") + start;
                    out.push_str(&scalar(&pipeline(rest[start + 2..end].trim(), scope)));
                    rest = &rest[end + 2..];
                }
                out.push_str(rest);
                out.push('\n');
            }
            Node::Nindent(expr, width) => {
                // Helm: the `{{-` eats the line break before, nindent puts one back, then
                // indents every line (empty ones too).
                let pad = " ".repeat(*width);
                let text = scalar(&pipeline(expr, scope));
                out.push_str(&pad);
                out.push_str(&text.replace('\n', &format!("\n{pad}")));
                out.push('\n');
            }
            Node::If(cond, body) => {
                if condition(cond, scope) {
                    emit(body, scope, out);
                }
            }
            Node::Range { vars, over, body } => {
                let items: Vec<(Value, Value)> = match pipeline(over, scope) {
                    Value::Null => Vec::new(),
                    Value::Sequence(s) => s
                        .into_iter()
                        .enumerate()
                        .map(|(i, e)| (Value::Number((i as u64).into()), e))
                        .collect(),
                    // Go ranges over a map in key order.
                    Value::Mapping(m) => {
                        let mut kv: Vec<(Value, Value)> = m.into_iter().collect();
                        kv.sort_by_key(|(k, _)| scalar(k));
                        kv
                    }
                    other => panic!("range over {other:?}"),
                };
                for (key, element) in items {
                    let mut inner = scope.clone();
                    inner.dot = Some(element.clone());
                    if let Some((k, v)) = vars {
                        inner.vars.push((k.clone(), key));
                        inner.vars.push((v.clone(), element));
                    }
                    emit(body, &inner, out);
                }
            }
        }
    }
}

/// Renders one template with `values`.
fn render(template: &str, values: &Value) -> String {
    let mut out = String::new();
    let scope = Ctx {
        values,
        dot: None,
        vars: Vec::new(),
    };
    emit(&parse(template), &scope, &mut out);
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
            // Helm leaves out documents a false `if` emptied (configmap.yaml by default).
            if doc.trim().is_empty() {
                continue;
            }
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
