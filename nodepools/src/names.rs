//! Kubernetes syntax rules for label keys (qualified names) and label values.

/// OpenAPI pattern of a qualified name (`example.com/name` or `name`); lengths are checked in
/// Rust and bounded by `maxLength` in the schema.
/// (Written without backslashes so that it can be embedded in CEL string literals as is.)
pub const QUALIFIED_NAME_PATTERN: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";

/// OpenAPI pattern of a label value (may be empty).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// Longest qualified name: a 253-character prefix, `/`, and a 63-character name.
pub const QUALIFIED_NAME_MAX: usize = 317;

/// Longest label value.
pub const LABEL_VALUE_MAX: usize = 63;

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Checks a label, taint or requirement key.
///
/// # Errors
/// A reason naming the key when it is not a valid qualified name.
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !is_dns_subdomain(p)) {
        return Err(format!(
            "invalid key {key:?}: the prefix must be a DNS subdomain (lower-case alphanumerics, '-' and '.', at most 253 characters)"
        ));
    }
    if !is_name_part(name) {
        return Err(format!(
            "invalid key {key:?}: the name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ));
    }
    Ok(())
}

/// Checks a label (or taint) value.
///
/// # Errors
/// A reason naming the value when it is not a valid label value.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name_part(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid value {value:?}: must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for ok in [
            "zone",
            "nvidia.com/gpu",
            "topology.kubernetes.io/zone",
            "a_b.c-d",
            "A1",
        ] {
            assert!(check_qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/x",
            "Example.com/x",
            "a/b/c",
            "-x",
            "x-",
            "nvidia.com/",
            "sp ace",
            "é",
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
        assert!(check_qualified_name(&"x".repeat(64)).is_err());
    }

    #[test]
    fn label_values() {
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("present").is_ok());
        assert!(check_label_value("a.b_c-d").is_ok());
        assert!(check_label_value("has space").is_err());
        assert!(check_label_value(&"v".repeat(64)).is_err());
    }
}
