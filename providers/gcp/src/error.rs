//! `GcpError`: what goes wrong in this crate, and how it maps onto [`ProviderError`].

use providers::{Action, OfferingKey, ProviderError};
use thiserror::Error;

/// A failure of the GCP provider.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GcpError {
    /// The provider's configuration (settings file, node class, project) is unusable.
    #[error("GCP provider configuration: {0}")]
    Config(String),
    /// Application Default Credentials could not be loaded or refreshed. The message is the
    /// auth library's, which never contains secret material.
    #[error(
        "no usable Google Cloud credentials: set GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth \
         application-default login`, or run with a workload identity ({0})"
    )]
    Credentials(String),
    /// The Compute API rate-limited the call and the retries ran out.
    #[error("Compute {operation}: throttled after {attempts} attempts: {message}")]
    Throttled {
        /// API method (`instances.insert`).
        operation: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The API's message.
        message: String,
    },
    /// The Compute API answered with an error.
    #[error("Compute {operation}: {code}: {message}")]
    Api {
        /// API method.
        operation: &'static str,
        /// HTTP status or error reason (`409`, `alreadyExists`, `QUOTA_EXCEEDED`).
        code: String,
        /// The API's message.
        message: String,
        /// Whether the same call may succeed later (5xx, timeouts, connection failures).
        transient: bool,
    },
    /// A long-running operation was not DONE within the configured timeout.
    #[error("Compute operation {operation} not done after {waited_s}s")]
    OperationTimeout {
        /// Operation name.
        operation: String,
        /// Seconds waited.
        waited_s: u64,
    },
    /// A launch request that cannot succeed as made.
    #[error("invalid launch request: {0}")]
    InvalidRequest(String),
    /// None of the offerings had capacity (or quota).
    #[error("insufficient capacity or quota for {} offerings", .0.len())]
    InsufficientCapacity(Vec<OfferingKey>),
    /// The instance is unknown to Compute Engine.
    #[error("instance {0} not found")]
    NotFound(String),
}

impl GcpError {
    /// The provider-level error for a failure of `action`.
    pub fn into_provider(self, action: Action) -> ProviderError {
        match self {
            GcpError::Throttled { .. } => ProviderError::Throttled {
                action,
                retry_after_s: None,
            },
            GcpError::InvalidRequest(why) => ProviderError::InvalidRequest { action, why },
            // A broken configuration will not heal by retrying the same call.
            GcpError::Config(_) => ProviderError::InvalidRequest {
                action,
                why: self.to_string(),
            },
            GcpError::InsufficientCapacity(offerings) => {
                ProviderError::InsufficientCapacity { action, offerings }
            }
            GcpError::NotFound(provider_id) => ProviderError::NotFound {
                action,
                provider_id,
            },
            GcpError::Credentials(_) | GcpError::Api { .. } | GcpError::OperationTimeout { .. } => {
                ProviderError::Other {
                    action,
                    message: self.to_string(),
                }
            }
        }
    }
}
