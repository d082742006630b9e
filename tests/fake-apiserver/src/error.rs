//! The crate's one error type: API failures that become a `metav1.Status`, and setup failures.

use axum::http::StatusCode;
use serde_json::{Value, json};

/// Everything that can go wrong in the fake API server.
///
/// The API variants map one-to-one onto the `reason`/`code` pairs the real API server uses, so
/// a client sees the same `kube::core::ErrorResponse` it would see against a real cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 404: the object, resource type or namespace does not exist.
    #[error("{message}")]
    NotFound {
        /// Human-readable message, as the real server words it.
        message: String,
        /// `details.kind` (the resource plural).
        kind: String,
        /// `details.name`.
        name: String,
    },
    /// 409 AlreadyExists: create of a name that is taken.
    #[error("{message}")]
    AlreadyExists {
        /// Human-readable message.
        message: String,
        /// `details.kind`.
        kind: String,
        /// `details.name`.
        name: String,
    },
    /// 409 Conflict: a stale resourceVersion (optimistic concurrency) or a failed precondition.
    #[error("{message}")]
    Conflict {
        /// Human-readable message.
        message: String,
        /// `details.kind`.
        kind: String,
        /// `details.name`.
        name: String,
    },
    /// 422 Invalid: the object fails validation; `field` names the offending path.
    #[error("{message}")]
    Invalid {
        /// Human-readable message, naming the field.
        message: String,
        /// Kind of the rejected object.
        kind: String,
        /// Name of the rejected object.
        name: String,
        /// `(field path, cause message)` pairs for `details.causes`.
        causes: Vec<(String, String)>,
    },
    /// 400 BadRequest: a malformed body, selector or query parameter.
    #[error("{0}")]
    BadRequest(String),
    /// 405 MethodNotAllowed.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 415 UnsupportedMediaType: e.g. a strategic merge patch on a custom resource.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 429 TooManyRequests: an eviction a PodDisruptionBudget does not allow.
    #[error("{message}")]
    TooManyRequests {
        /// Human-readable message.
        message: String,
        /// `(reason, message)` pairs for `details.causes`.
        causes: Vec<(String, String)>,
    },
    /// 410 Gone: a resourceVersion or continue token older than the retained history.
    #[error("{0}")]
    Gone(String),
    /// 500 InternalError.
    #[error("{0}")]
    Internal(String),
    /// 503 ServiceUnavailable (only ever injected, see `Options::faults`).
    #[error("{0}")]
    Unavailable(String),
    /// A CRD document could not be parsed or registered.
    #[error("invalid CustomResourceDefinition: {0}")]
    Crd(String),
    /// Building a kube client for the server failed.
    #[error("kube client: {0}")]
    Client(String),
    /// Reading a file or binding a socket failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A 404 for an object.
    pub(crate) fn not_found(kind_plural: &str, group: &str, name: &str) -> Self {
        let what = qualified(kind_plural, group);
        Error::NotFound {
            message: format!("{what} \"{name}\" not found"),
            kind: kind_plural.to_string(),
            name: name.to_string(),
        }
    }

    /// A 409 Conflict for a stale resourceVersion.
    pub(crate) fn conflict(kind_plural: &str, group: &str, name: &str, why: &str) -> Self {
        let what = qualified(kind_plural, group);
        Error::Conflict {
            message: format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"),
            kind: kind_plural.to_string(),
            name: name.to_string(),
        }
    }

    /// A 422 for one field.
    pub(crate) fn invalid(kind: &str, name: &str, field: &str, detail: &str) -> Self {
        Error::Invalid {
            message: format!("{kind} \"{name}\" is invalid: {field}: {detail}"),
            kind: kind.to_string(),
            name: name.to_string(),
            causes: vec![(field.to_string(), detail.to_string())],
        }
    }

    /// The HTTP status code this error is served with.
    pub fn code(&self) -> StatusCode {
        match self {
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::AlreadyExists { .. } | Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::BadRequest(_) | Error::Crd(_) => StatusCode::BAD_REQUEST,
            Error::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Gone(_) => StatusCode::GONE,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(_) | Error::Io { .. } | Error::Client(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The `metav1.Status` body for this error, as the real API server would send it.
    pub fn to_status(&self) -> Value {
        let (reason, details) = match self {
            Error::NotFound { kind, name, .. } => {
                ("NotFound", Some(json!({"name": name, "kind": kind})))
            }
            Error::AlreadyExists { kind, name, .. } => {
                ("AlreadyExists", Some(json!({"name": name, "kind": kind})))
            }
            Error::Conflict { kind, name, .. } => {
                ("Conflict", Some(json!({"name": name, "kind": kind})))
            }
            Error::Invalid {
                kind, name, causes, ..
            } => {
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|(field, message)| {
                        json!({"reason": "FieldValueInvalid", "message": message, "field": field})
                    })
                    .collect();
                (
                    "Invalid",
                    Some(json!({"name": name, "kind": kind, "causes": causes})),
                )
            }
            Error::BadRequest(_) | Error::Crd(_) => ("BadRequest", None),
            Error::MethodNotAllowed(_) => ("MethodNotAllowed", None),
            Error::UnsupportedMediaType(_) => ("UnsupportedMediaType", None),
            Error::TooManyRequests { causes, .. } => {
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|(reason, message)| json!({"reason": reason, "message": message}))
                    .collect();
                ("TooManyRequests", Some(json!({"causes": causes})))
            }
            Error::Gone(_) => ("Expired", None),
            Error::Unavailable(_) => ("ServiceUnavailable", None),
            Error::Internal(_) | Error::Io { .. } | Error::Client(_) => ("InternalError", None),
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": reason,
            "code": self.code().as_u16(),
        });
        if let Some(details) = details {
            status["details"] = details;
        }
        status
    }
}

/// `pods` or `nodepools.gpu-autoscaler.dev`, the way the real server names a resource in messages.
fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// Result alias for the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
