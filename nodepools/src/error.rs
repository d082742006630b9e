//! The crate's error enum and the list of field-level problems validation returns.

use std::fmt;

use thiserror::Error;

/// One problem with one field of an object, e.g.
/// `spec.disruption.gpuUtilizationThreshold: 1.5 is outside [0, 1]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Where the problem is, as a JSON-ish path from the object root (`spec.limits["cpu"]`).
    pub path: String,
    /// What is wrong, in words.
    pub message: String,
    /// The message of the CRD's CEL rule this problem restates, when the controller's own
    /// check repeats one: `validate`, which runs both, reports the problem once.
    pub restates: Option<&'static str>,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found while validating an object, in the order the fields were visited.
///
/// Displays as one `path: message` line per problem. Never empty when returned as an error.
#[derive(Clone, Debug, Default, PartialEq, Eq, Error)]
pub struct ValidationErrors {
    /// The problems.
    pub errors: Vec<FieldError>,
}

impl ValidationErrors {
    /// Whether no problem was recorded.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// The problems as `path: message` lines.
    pub fn lines(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }

    /// Records a problem at `path`.
    pub(crate) fn push(&mut self, path: &FieldPath, message: impl fmt::Display) {
        self.errors.push(FieldError {
            path: path.to_string(),
            message: message.to_string(),
            restates: None,
        });
    }

    /// Records a problem at `path` that restates the CRD's CEL rule whose message is `rule`
    /// (the controller checks it too, for objects the API server did not check).
    pub(crate) fn push_restating(
        &mut self,
        path: &FieldPath,
        message: impl fmt::Display,
        rule: &'static str,
    ) {
        self.push(path, message);
        if let Some(e) = self.errors.last_mut() {
            e.restates = Some(rule);
        }
    }

    /// `Ok(value)` when nothing was recorded, otherwise `Err(self)`.
    pub(crate) fn finish<T>(self, value: T) -> Result<T, ValidationErrors> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A path to a field, built while walking an object: `spec`, `.template`, `[2]`, `["cpu"]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldPath(String);

impl FieldPath {
    /// The path of a top-level field.
    pub(crate) fn root(name: &str) -> Self {
        FieldPath(name.to_string())
    }

    /// `self.name`.
    pub(crate) fn field(&self, name: &str) -> Self {
        FieldPath(format!("{}.{name}", self.0))
    }

    /// `self[i]`.
    pub(crate) fn index(&self, i: usize) -> Self {
        FieldPath(format!("{}[{i}]", self.0))
    }

    /// `self["key"]`.
    pub(crate) fn key(&self, key: &str) -> Self {
        FieldPath(format!("{}[{key:?}]", self.0))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Errors of this crate; each variant names the action that failed.
#[derive(Debug, Error)]
pub enum Error {
    /// A YAML document could not be read as the expected kind (wrong shape or types).
    #[error("reading {kind} from YAML document {document}: {source}")]
    ParseYaml {
        /// The kind that was expected (`NodePool`).
        kind: &'static str,
        /// 0-based index of the document in a multi-document stream.
        document: usize,
        /// The parser's complaint.
        #[source]
        source: serde_norway::Error,
    },
    /// The YAML text nests brackets deeper than the parser accepts (checked before parsing,
    /// which would take minutes).
    #[error("reading YAML: {0}")]
    Nesting(#[from] autoscaler_core::NestingError),
    /// A YAML document is not of the expected `apiVersion` and `kind`.
    #[error(
        "reading YAML document {document}: expected {expected} of {}, found {found}",
        crate::API_VERSION
    )]
    CheckKind {
        /// 0-based index of the document in a multi-document stream.
        document: usize,
        /// The kind that was expected.
        expected: &'static str,
        /// `apiVersion/kind` found.
        found: String,
    },
    /// An object was well-formed but some of its fields have invalid values.
    #[error("validating {kind} {name:?}:\n{errors}")]
    Validate {
        /// The kind (`NodePool`, `NodeClaim`).
        kind: &'static str,
        /// `metadata.name`.
        name: String,
        /// Every problem found.
        #[source]
        errors: ValidationErrors,
    },
    /// A CRD could not be rendered as YAML.
    #[error("rendering CRD {name} as YAML: {source}")]
    RenderCrd {
        /// The CRD's name.
        name: String,
        /// The serializer's complaint.
        #[source]
        source: serde_norway::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_display() {
        let p = FieldPath::root("spec")
            .field("limits")
            .key("nvidia.com/gpu");
        assert_eq!(p.to_string(), r#"spec.limits["nvidia.com/gpu"]"#);
        let mut e = ValidationErrors::default();
        e.push(&p, "must not be negative");
        e.push(
            &FieldPath::root("spec").field("taints").index(1),
            "duplicate",
        );
        assert_eq!(
            e.to_string(),
            "spec.limits[\"nvidia.com/gpu\"]: must not be negative\nspec.taints[1]: duplicate"
        );
        assert_eq!(e.len(), 2);
        assert!(e.finish(()).is_err());
        assert_eq!(ValidationErrors::default().finish(7), Ok(7));
    }
}
