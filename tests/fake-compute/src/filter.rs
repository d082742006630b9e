//! The `filter` query parameter of list calls: the subset of the API's filter grammar the
//! provider sends.

use serde_json::Value;

/// One `field = "value"` (or `!=`) term of a list filter.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Term {
    field: String,
    value: String,
    negate: bool,
}

/// Parses the subset of Compute list filters the provider uses: terms `field = "value"`,
/// `field != value`, each optionally in parentheses, joined by `AND` or juxtaposition.
pub(super) fn parse_filter(f: &str) -> Option<Vec<Term>> {
    let mut terms = Vec::new();
    let normalized = f.replace(['(', ')'], " ");
    let tokens: Vec<&str> = normalized
        .split_whitespace()
        .filter(|t| *t != "AND")
        .collect();
    let mut i = 0;
    while i < tokens.len() {
        // `a=b` / `a!=b` written without spaces, or `a = b`.
        let (field, op, value, used) = if let Some((a, b)) = tokens[i].split_once("!=") {
            (a, "!=", b, 1)
        } else if let Some((a, b)) = tokens[i].split_once('=') {
            (a, "=", b, 1)
        } else {
            let op = *tokens.get(i + 1)?;
            if op != "=" && op != "!=" && op != "eq" && op != "ne" {
                return None;
            }
            (tokens[i], op, *tokens.get(i + 2)?, 3)
        };
        if field.is_empty() || value.is_empty() {
            return None;
        }
        terms.push(Term {
            field: field.to_string(),
            value: value.trim_matches('"').to_string(),
            negate: op == "!=" || op == "ne",
        });
        i += used;
    }
    Some(terms)
}

pub(super) fn matches(instance: &Value, terms: &[Term]) -> bool {
    terms.iter().all(|t| {
        let actual = if let Some(key) = t.field.strip_prefix("labels.") {
            instance["labels"][key].as_str()
        } else {
            instance[t.field.as_str()].as_str()
        };
        (actual == Some(t.value.as_str())) != t.negate
    })
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn filters_parse_and_match() {
        let t =
            parse_filter("(labels.gpu-autoscaler-cluster = \"c1\") AND (labels.x != y)").unwrap();
        assert_eq!(t.len(), 2);
        assert!(t[1].negate);
        let inst = json!({"name": "n", "labels": {"gpu-autoscaler-cluster": "c1", "x": "z"}});
        assert!(matches(&inst, &t));
        assert!(!matches(
            &json!({"labels": {"gpu-autoscaler-cluster": "c2"}}),
            &t
        ));
        assert!(matches(&inst, &parse_filter("name=n").unwrap()));
        assert!(parse_filter("labels.a >").is_none());
    }
}
