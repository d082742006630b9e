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
use autoscaler::controller::settings::{ProviderKind, RunArgs};
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
            stack
                .last_mut()
                .unwrap()
                .1
                .push(Node::Line(line.to_string()));
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
    let values: Value = serde_yaml::from_str(
        "a: {b: 3}\np: kwok\nflag: false\nnone: {}\nlist: [x, y]\nmap: {z: 1, a: 'q\"2'}\ntext: \"l1\\nl2\\n\"\n",
    )
    .unwrap();
    let t = "x: {{ .Values.a.b }}\n{{- if eq .Values.p \"kwok\" }}\nk: 1\n{{- end }}\n{{- if .Values.flag }}\nf: 1\n{{- end }}\nns: {{ .Release.Namespace }}\n";
    assert_eq!(render(t, &values), "x: 3\nk: 1\nns: gpu-autoscaler\n");
    // An empty map is false, as in Go templates.
    assert_eq!(
        render("{{- if .Values.none }}\nn: 1\n{{- end }}\n", &values),
        ""
    );
    // A list in order, `.` its element; `$.Values` reaches the root from inside.
    assert_eq!(
        render(
            "  {{- range .Values.list }}\n  - {{ . }}{{ $.Values.a.b }}\n  {{- end }}\n",
            &values
        ),
        "  - x3\n  - y3\n"
    );
    // A map in key order, values quoted as Go's %q does.
    assert_eq!(
        render(
            "{{- range $k, $v := .Values.map }}\n{{ $k }}: {{ $v | quote }}\n{{- end }}\n",
            &values
        ),
        "a: \"q\\\"2\"\nz: \"1\"\n"
    );
    // nindent indents every line, the empty one after the last line break too.
    assert_eq!(
        render("d: |\n  {{- .Values.text | nindent 2 }}\n", &values),
        "d: |\n  l1\n  l2\n  \n"
    );
    // Ranges over nothing emit nothing; nested blocks close in order.
    assert_eq!(
        render(
            "{{- range .Values.none }}\nno\n{{- end }}\n{{- if .Values.list }}\n{{- range .Values.list }}\n{{ . }}\n{{- end }}\n{{- end }}\n",
            &values
        ),
        "x\ny\n"
    );
}

/// Constructs outside the subset, and Go-template errors, fail instead of rendering wrongly.
#[test]
fn renderer_rejects_what_it_does_not_implement() {
    let values: Value = serde_yaml::from_str("a: 1\nlist: [x]\n").unwrap();
    for t in [
        // Inside range `.` is the element, so Helm fails on `.Values` there.
        "{{- range .Values.list }}\n{{ .Values.a }}\n{{- end }}\n",
        "{{ .Values.missing }}\n",
        "{{ .Values.a | upper }}\n",
        "{{- else }}\n",
        "a: {{- .Values.a }}\n",
        "{{- if .Values.a }}\n",
        "{{- end }}\n",
        "{{ include \"x\" . }}\n",
    ] {
        let r = std::panic::catch_unwind(|| render(t, &values));
        assert!(r.is_err(), "rendered {t:?} as {:?}", r.unwrap());
    }
}

/// `values.yaml` with `overrides` merged in as `helm install -f` does: maps key by key,
/// anything else replaced.
fn values_with(overrides: &str) -> Value {
    fn merge(base: &mut Value, over: Value) {
        match (base, over) {
            (Value::Mapping(b), Value::Mapping(o)) => {
                for (k, v) in o {
                    match b.get_mut(&k) {
                        Some(slot) => merge(slot, v),
                        None => {
                            b.insert(k, v);
                        }
                    }
                }
            }
            (b, o) => *b = o,
        }
    }
    let mut v = default_values();
    merge(&mut v, serde_yaml::from_str(overrides).unwrap());
    v
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
fn local_copy(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn with_config(overrides: &str, config: &str) -> Value {
    let mut v = values_with(overrides);
    v["providerConfig"] = Value::String(config.to_string());
    v
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
    let d = docs(&render_chart(&with_config(AWS_VALUES, config)));
    let (path, text) = mounted_settings(&d);
    assert_eq!(text, config);
    let a = args(&d);
    assert!(a.contains(&format!("--aws-config={path}")), "{a:?}");
    assert!(a.contains(&"--provider=aws".to_string()));
    assert!(a.contains(&"--region=us-west-2".to_string()));
    assert!(!a.iter().any(|x| x.starts_with("--gcp-config")
        || x.starts_with("--project")
        || x.starts_with("--zone")));
    let mut run = run_args(&d);
    assert_eq!(run.aws.config.as_deref(), Some(Path::new(&path)));
    let (_dir, local) = local_copy(&text);
    run.aws.config = Some(local);
    let s = run
        .aws
        .settings(Some(&run.region), Some(&run.cluster_name))
        .expect("the binary loads the mounted settings");
    assert_eq!(s.region.as_deref(), Some("us-west-2"), "--region wins");
    assert_eq!(s.cluster, "prod");
    assert!(!s.node_classes["default"].ami.is_empty(), "an AMI");
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
    let d = docs(&render_chart(&with_config(GCP_VALUES, &config)));
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
    let mut run = run_args(&d);
    assert_eq!(run.gcp.config.as_deref(), Some(Path::new(&path)));
    assert_eq!(run.gcp.project.as_deref(), Some("ml-prod"));
    assert_eq!(run.gcp.zones, ["us-central1-a", "us-central1-b"]);
    let (_dir, local) = local_copy(&text);
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
    let sa = find(&d, "ServiceAccount", "gpu-autoscaler").unwrap();
    assert_eq!(
        sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"],
        "gpu-autoscaler@ml-prod.iam.gserviceaccount.com"
    );
}

/// The default (kwok) install has no settings file, no mount and no annotations.
#[test]
fn default_values_render_no_provider_file() {
    let d = docs(&render_chart(&default_values()));
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
    let sets = [
        default_values(),
        values_with("provider: fake"),
        with_config(
            &format!(
                "{AWS_VALUES}\nendpointUrl: http://127.0.0.1:5000\nextraArgs: [--lease-name=blue]\n"
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
        let d = docs(&render_chart(values));
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
        let d = docs(&render_chart(&values_with(&format!("extraArgs: {extra}"))));
        assert!(parse_run(&args(&d)).is_err(), "{extra} was accepted");
    }
}

/// The chart's defaults are the binary's, apart from the region and the log format, so the
/// generated manifest runs what `gpu-autoscaler run` documents.
#[test]
fn chart_defaults_are_the_binarys_defaults() {
    let mut chart = run_args(&docs(&render_chart(&default_values())));
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
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Install in a cluster\n")
        .nth(1)
        .expect("the README's install section")
        .split("\n## ")
        .next()
        .unwrap();
    let snippets: Vec<&str> = section
        .split("```yaml\n")
        .skip(1)
        .map(|s| s.split("```").next().unwrap())
        .collect();
    let mut providers = BTreeSet::new();
    for snippet in snippets {
        let d = docs(&render_chart(&values_with(snippet)));
        let mut run = run_args(&d);
        let (path, text) = mounted_settings(&d);
        let (_dir, local) = local_copy(&text);
        match run.provider {
            ProviderKind::Aws => {
                assert_eq!(run.aws.config.as_deref(), Some(Path::new(&path)));
                run.aws.config = Some(local);
                let s = run
                    .aws
                    .settings(Some(&run.region), Some(&run.cluster_name))
                    .unwrap_or_else(|e| panic!("README AWS settings: {e}"));
                assert!(!s.node_classes["default"].ami.is_empty());
            }
            ProviderKind::Gcp => {
                assert_eq!(run.gcp.config.as_deref(), Some(Path::new(&path)));
                run.gcp.config = Some(local);
                run.gcp
                    .settings(autoscaler::gcp::Common {
                        cluster: Some(&run.cluster_name),
                        region: Some(&run.region),
                        endpoint_url: None,
                    })
                    .unwrap_or_else(|e| panic!("README GCP settings: {e}"));
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
