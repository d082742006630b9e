//! `AwsError`: what goes wrong in this crate, and how it maps onto [`ProviderError`].

use providers::{Action, OfferingKey, ProviderError};
use thiserror::Error;

/// A failure of the AWS provider.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AwsError {
    /// The provider's configuration (settings file, node class, region) is unusable.
    #[error("AWS provider configuration: {0}")]
    Config(String),
    /// No credentials could be found by the SDK's default chain.
    #[error(
        "no AWS credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a web \
         identity token (IRSA) or run on an instance with a role ({0})"
    )]
    Credentials(String),
    /// The EC2 API rate-limited the call and the retries ran out.
    #[error("EC2 {operation}: throttled ({code}) after {attempts} attempts")]
    Throttled {
        /// API operation (`CreateFleet`).
        operation: &'static str,
        /// The error code the API answered with (`RequestLimitExceeded`).
        code: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The EC2 API answered with an error.
    #[error("EC2 {operation}: {code}: {message}")]
    Api {
        /// API operation.
        operation: &'static str,
        /// Error code (`InvalidParameterValue`), or the HTTP status for an unparsed answer.
        code: String,
        /// The API's message.
        message: String,
        /// Whether the same call may succeed later (5xx, timeouts, connection failures).
        transient: bool,
    },
    /// A launch request that cannot succeed as made.
    #[error("invalid launch request: {0}")]
    InvalidRequest(String),
    /// None of the offerings had capacity.
    #[error("insufficient capacity for {}", .0.len())]
    InsufficientCapacity(Vec<OfferingKey>),
    /// The instance is unknown to EC2.
    #[error("instance {0} not found")]
    NotFound(String),
}

impl AwsError {
    /// The provider-level error for a failure of `action`.
    pub fn into_provider(self, action: Action) -> ProviderError {
        match self {
            AwsError::Throttled { .. } => ProviderError::Throttled {
                action,
                retry_after_s: None,
            },
            AwsError::InvalidRequest(why) => ProviderError::InvalidRequest { action, why },
            // A broken configuration will not heal by retrying the same call.
            AwsError::Config(_) => ProviderError::InvalidRequest {
                action,
                why: self.to_string(),
            },
            AwsError::InsufficientCapacity(offerings) => {
                ProviderError::InsufficientCapacity { action, offerings }
            }
            AwsError::NotFound(provider_id) => ProviderError::NotFound {
                action,
                provider_id,
            },
            AwsError::Credentials(_) | AwsError::Api { .. } => ProviderError::Other {
                action,
                message: self.to_string(),
            },
        }
    }
}
