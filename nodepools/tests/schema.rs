//! The CRD schemas agree with the Rust validation: every CEL rule compiles and stays within the
//! API server's cost budget, and no pattern rejects a value Rust accepts.

mod common;

use kube::core::cel::{CompiledSchema, ScopeContext, WarningKind, analyze_rule, compile_schema};
use std::sync::LazyLock;

use proptest::prelude::*;
use regex::Regex;
use serde_json::Value;

/// Every `x-kubernetes-validations` rule of the tree with the schema node it sits on.
fn rules(node: &CompiledSchema, path: &str, out: &mut Vec<(String, String)>) {
    for v in &node.validations {
        match v {
            Ok(r) => out.push((path.to_string(), r.rule.rule.clone())),
            Err(e) => panic!("{path}: rule does not compile: {e:?}"),
        }
    }
    for (k, child) in &node.properties {
        rules(child, &format!("{path}.{k}"), out);
    }
    if let Some(items) = &node.items {
        rules(items, &format!("{path}[]"), out);
    }
    if let Some(a) = &node.additional_properties {
        rules(a, &format!("{path}{{}}"), out);
    }
}

fn analyze(node: &CompiledSchema, path: &str, warnings: &mut Vec<String>) {
    // The scope check counts comprehension variables (`all(t, ...)`) as free variables; those
    // are bound by the rule itself and are fine.
    let bound = Regex::new(r"(all|exists|exists_one|map|filter)\((\w+),").unwrap();
    for r in node.validations.iter().flatten() {
        let rule = &r.rule.rule;
        let vars: Vec<String> = bound
            .captures_iter(rule)
            .map(|c| c[2].to_string())
            .collect();
        for w in analyze_rule(rule, node, ScopeContext::CrdValidation) {
            let comprehension_var = w.kind == WarningKind::WrongScope
                && vars
                    .iter()
                    .any(|v| w.message.starts_with(&format!("variable '{v}'")));
            if !comprehension_var {
                warnings.push(format!("{path}: {}: {}", w.rule, w.message));
            }
        }
    }
    for (k, child) in &node.properties {
        analyze(child, &format!("{path}.{k}"), warnings);
    }
    if let Some(items) = &node.items {
        analyze(items, &format!("{path}[]"), warnings);
    }
}

#[test]
fn cel_rules_compile_and_fit_the_cost_budget() {
    for kind in ["NodePool", "NodeClaim"] {
        let compiled = compile_schema(&common::schema_of(kind));
        assert!(
            !compiled.has_errors(),
            "{kind}: {:?}",
            compiled.compilation_errors()
        );
        let mut found = Vec::new();
        rules(&compiled, kind, &mut found);
        assert!(found.len() >= 2, "{kind}: rules are present: {found:?}");
        let mut warnings = Vec::new();
        analyze(&compiled, kind, &mut warnings);
        assert!(warnings.is_empty(), "{kind}:\n{}", warnings.join("\n"));
    }
}

/// The schema node at a dotted path of property names (`[]` steps into items,
/// `{}` into additionalProperties).
fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(schema, |s, step| match step {
        "[]" => &s["items"],
        "{}" => &s["additionalProperties"],
        p => &s["properties"][p],
    })
}

fn pattern(kind: &str, path: &str) -> Regex {
    let schema = common::schema_of(kind);
    let p = node(&schema, path)["pattern"]
        .as_str()
        .unwrap_or_else(|| panic!("{path} has a pattern"));
    Regex::new(p).unwrap()
}

#[test]
fn every_known_mig_config_fits_the_schema() {
    let re = pattern("NodePool", "spec.gpuSharing.mig.config");
    for m in autoscaler_core::gpu::mig::MODELS {
        for name in autoscaler_core::gpu::mig::configs(m) {
            assert!(nodepools::mig::is_known_config(&name), "{name}");
            assert!(re.is_match(&name), "{name} does not fit {re}");
        }
    }
}

/// The patterns under test, compiled once.
struct Patterns {
    key: Regex,
    label_value: Regex,
    duration_or_never: Regex,
    duration: Regex,
    budget_nodes: Regex,
    budget_schedule: Regex,
    budget_duration: Regex,
    quantity: Regex,
}

static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| Patterns {
    key: pattern("NodePool", "spec.template.requirements.[].key"),
    label_value: pattern("NodePool", "spec.template.metadata.labels.{}"),
    duration_or_never: pattern("NodePool", "spec.disruption.consolidateAfter"),
    duration: pattern("NodePool", "spec.disruption.unneededTime"),
    budget_nodes: pattern("NodePool", "spec.disruption.budgets.[].nodes"),
    budget_schedule: pattern("NodePool", "spec.disruption.budgets.[].schedule"),
    budget_duration: pattern("NodePool", "spec.disruption.budgets.[].duration"),
    quantity: pattern("NodePool", "spec.limits.{}"),
});

fn nodepool_with_budget(nodes: &str) -> nodepools::NodePool {
    let mut p = nodepools::NodePool::new("p", Default::default());
    p.spec.disruption.budgets[0].nodes = nodes.to_string();
    p
}

proptest! {
    #[test]
    fn qualified_names_rust_accepts_fit_the_schema(key in "[a-zA-Z0-9./_-]{0,20}") {
        let re = &PATTERNS.key;
        if nodepools::names::check_qualified_name(&key).is_ok() {
            prop_assert!(re.is_match(&key), "{}", key);
        }
    }

    #[test]
    fn label_values_rust_accepts_fit_the_schema(v in "[a-zA-Z0-9._ -]{0,12}") {
        let re = &PATTERNS.label_value;
        prop_assert_eq!(nodepools::names::check_label_value(&v).is_ok(), re.is_match(&v), "{}", v);
    }

    #[test]
    fn durations_agree_with_the_schema(d in "(Never|[0-9smhd. ]{0,8})") {
        let (never, plain) = (&PATTERNS.duration_or_never, &PATTERNS.duration);
        // The ten-year bound is beyond a pattern: validation alone reports it.
        let accepted = |r: Result<nodepools::Duration, String>| match r {
            Ok(_) => true,
            Err(e) => e.ends_with("longer than 10 years"),
        };
        prop_assert_eq!(accepted(nodepools::parse_duration(&d, true)), never.is_match(&d), "{}", d);
        prop_assert_eq!(accepted(nodepools::parse_duration(&d, false)), plain.is_match(&d), "{}", d);
    }

    #[test]
    fn budgets_agree_with_the_schema(n in "[0-9%a-]{0,5}") {
        let re = &PATTERNS.budget_nodes;
        prop_assert_eq!(nodepool_with_budget(&n).validate().is_ok(), re.is_match(&n), "{}", n);
    }

    /// A schedule Rust accepts fits the pattern (which checks only the shape: macros or five
    /// fields); a duration is accepted exactly when it fits, up to the ten-year bound.
    #[test]
    fn budget_windows_agree_with_the_schema(
        s in "[0-9*/,?@a-z \t-]{0,16}",
        d in "[0-9hms]{0,6}",
    ) {
        let mut p = nodepool_with_budget("0");
        p.spec.disruption.budgets[0].schedule = Some(s.clone());
        p.spec.disruption.budgets[0].duration = Some("1h".into());
        if p.validate().is_ok() {
            prop_assert!(PATTERNS.budget_schedule.is_match(&s), "{:?}", s);
        }
        p.spec.disruption.budgets[0].schedule = Some("@daily".into());
        p.spec.disruption.budgets[0].duration = Some(d.clone());
        let accepted = match p.validate() {
            Ok(()) => true,
            Err(e) => e.lines().iter().all(|l| l.ends_with("longer than 10 years")),
        };
        prop_assert_eq!(accepted, PATTERNS.budget_duration.is_match(&d), "{}", d);
    }

    #[test]
    fn quantities_rust_accepts_fit_the_schema(q in "[0-9.+eEKMGTPkmnui-]{1,8}") {
        let re = &PATTERNS.quantity;
        let mut p = nodepools::NodePool::new("p", Default::default());
        p.spec.limits.insert(
            "example.com/thing".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.clone()),
        );
        let rust_ok = autoscaler_core::Quantity::parse(&q).is_ok_and(|x| !x.is_negative())
            && p.validate().is_ok();
        // "-0" is zero to Rust; the schema refuses any sign, which is stricter and harmless.
        if rust_ok && !q.starts_with('-') {
            prop_assert!(re.is_match(&q), "{}", q);
        }
    }
}
