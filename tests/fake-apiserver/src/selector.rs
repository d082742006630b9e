//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!` not-exists) and field selectors.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{Error, Result};

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Req>);

/// Splits on commas that are not inside parentheses (`a in (x,y),b` has two terms).
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn bad(s: &str) -> Error {
    Error::BadRequest(format!(
        "unable to parse requirement: invalid label selector {s:?}"
    ))
}

fn parse_set(term: &str, rest: &str) -> Result<Vec<String>> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(term))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for term in split_terms(s) {
            let t = term.trim();
            if t.is_empty() {
                return Err(bad(s));
            }
            if let Some(key) = t.strip_prefix('!') {
                reqs.push(Req::NotExists(key.trim().to_string()));
            } else if let Some((k, v)) = t.split_once("!=") {
                reqs.push(Req::NotIn(k.trim().to_string(), vec![v.trim().to_string()]));
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                reqs.push(Req::In(k.trim().to_string(), vec![v.trim().to_string()]));
            } else if let Some((k, rest)) = split_word(t, "notin") {
                reqs.push(Req::NotIn(k, parse_set(s, rest)?));
            } else if let Some((k, rest)) = split_word(t, "in") {
                reqs.push(Req::In(k, parse_set(s, rest)?));
            } else if t.contains(char::is_whitespace) || t.contains('(') {
                return Err(bad(s));
            } else {
                reqs.push(Req::Exists(t.to_string()));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Builds a selector from a `metav1.LabelSelector` object (matchLabels + matchExpressions),
    /// as PodDisruptionBudgets and DaemonSets carry it.
    pub fn from_object(sel: &Value) -> Result<Self> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Req::In(
                    k.clone(),
                    vec![v.as_str().unwrap_or_default().to_string()],
                ));
            }
        }
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e["key"].as_str().unwrap_or_default().to_string();
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            reqs.push(match e["operator"].as_str() {
                Some("In") => Req::In(key, values),
                Some("NotIn") => Req::NotIn(key, values),
                Some("Exists") => Req::Exists(key),
                Some("DoesNotExist") => Req::NotExists(key),
                other => {
                    return Err(Error::BadRequest(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            });
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            // `!=` and `notin` also match objects that lack the label, as in Kubernetes.
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
        })
    }

    /// Whether an object's `metadata.labels` satisfy the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        self.matches_labels(&labels_of(obj))
    }
}

/// `key <word> (...)` with whitespace around the word.
fn split_word<'a>(t: &'a str, word: &str) -> Option<(String, &'a str)> {
    let mut parts = t.splitn(2, char::is_whitespace);
    let key = parts.next()?;
    let rest = parts.next()?.trim_start();
    let rest = rest.strip_prefix(word)?;
    if !rest.trim_start().starts_with('(') {
        return None;
    }
    Some((key.to_string(), rest))
}

/// An object's labels as a map (empty when absent).
pub(crate) fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses and checks each field against the fields the resource supports
    /// (`metadata.name`, `metadata.namespace`, plus `supported`), as the real server does (400).
    pub fn parse(s: &str, supported: &[String]) -> Result<Self> {
        let mut out = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(out));
        }
        for term in s.split(',') {
            let (path, eq, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, true, v)
            } else {
                return Err(Error::BadRequest(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let path = path.trim();
            if path != "metadata.name"
                && path != "metadata.namespace"
                && !supported.iter().any(|f| f == path)
            {
                return Err(Error::BadRequest(format!(
                    "field label not supported: {path}"
                )));
            }
            out.push((path.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object satisfies every term; a missing field compares as the empty string
    /// (so `spec.nodeName=` selects unscheduled pods, as in Kubernetes).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for p in path.split('.') {
                cur = cur.and_then(|c| c.get(p));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (got == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_selector_operators() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("tier notin (back)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier in (front),!gpu", true),
            ("app=web,tier=back", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let pods = vec!["spec.nodeName".to_string(), "status.phase".to_string()];
        let m = |s: &str| FieldSelector::parse(s, &pods).unwrap().matches(&o);
        assert!(m("metadata.name=a"));
        assert!(m("spec.nodeName==n1"));
        assert!(!m("spec.nodeName!=n1"));
        assert!(m("status.phase="));
        assert!(m("status.phase!=Running"));
        assert!(FieldSelector::parse("spec.bogus=x", &pods).is_err());
    }
}
