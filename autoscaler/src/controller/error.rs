//! The one error type of the autoscaler library.

use thiserror::Error;

/// What can go wrong in the controller.
#[derive(Debug, Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[cfg(feature = "controller")]
    #[error("{action}: {source}")]
    Kube {
        /// What was being done, e.g. `patching NodeClaim gpu-x status`.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Reading the kubeconfig or in-cluster configuration failed.
    #[error("loading the Kubernetes client configuration: {0}")]
    KubeConfig(String),
    /// A cloud provider call failed.
    #[error(transparent)]
    Provider(#[from] providers::ProviderError),
    /// An object could not be translated into the core's vocabulary.
    #[error("{object}: {source}")]
    Translate {
        /// `kind namespace/name`.
        object: String,
        /// What was wrong.
        #[source]
        source: Box<super::translate::TranslateError>,
    },
    /// The object a command names does not exist (`explain`).
    #[error("{kind} {name} not found")]
    NotFound {
        /// `pod`, `node`, `NodePool`.
        kind: &'static str,
        /// Its name (`namespace/name` for a pod).
        name: String,
    },
    /// A command-line argument is malformed, e.g. a pod not written `NAMESPACE/NAME`.
    #[error("{0}")]
    Usage(String),
    /// A command-line or configuration value is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// The provider asked for is a cargo feature this binary was built without.
    #[error(
        "this gpu-autoscaler was built without the `{0}` feature, so it has no {0} provider: \
         build it with `cargo build --release -p autoscaler --features {0}` (the release image \
         has every provider)"
    )]
    NotBuilt(&'static str),
    /// The subcommand asked for needs the `controller` cargo feature (a Kubernetes client),
    /// which this binary was built without.
    #[error(
        "this gpu-autoscaler was built without the `controller` feature, so it cannot `{0}`: \
         build it with `cargo build --release -p autoscaler --features controller` (the release \
         image has every feature)"
    )]
    NoController(&'static str),
    /// A cluster snapshot file cannot be written, read or replayed.
    #[error("snapshot {path}: {why}")]
    Snapshot {
        /// The file.
        path: String,
        /// What is wrong, naming the document, object or field.
        why: String,
    },
    /// Serving `/metrics` and the health endpoints failed.
    #[error("HTTP server on {addr}: {source}")]
    Http {
        /// The listen address.
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps a kube error with what was being done.
    #[cfg(feature = "controller")]
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            action: action.into(),
            source,
        }
    }

    /// The HTTP status of a failed API call, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            #[cfg(feature = "controller")]
            Error::Kube {
                source: kube::Error::Api(s),
                ..
            } => Some(s.code),
            _ => None,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
