//! `ProviderError`: what can go wrong talking to a cloud, and whether to retry.

use std::fmt;

use thiserror::Error;

use crate::provider::OfferingKey;

/// The provider call that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// [`crate::CloudProvider::instance_types`].
    InstanceTypes,
    /// [`crate::CloudProvider::launch`].
    Launch,
    /// [`crate::CloudProvider::delete`].
    Delete,
    /// [`crate::CloudProvider::get`].
    Get,
    /// [`crate::CloudProvider::list`].
    List,
    /// [`crate::CloudProvider::collect_placement_groups`].
    CollectPlacementGroups,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::InstanceTypes => "listing instance types",
            Action::Launch => "launching an instance",
            Action::Delete => "deleting an instance",
            Action::Get => "getting an instance",
            Action::List => "listing instances",
            Action::CollectPlacementGroups => "collecting placement groups",
        })
    }
}

fn join(offerings: &[OfferingKey]) -> String {
    offerings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn retry_hint(after: &Option<u64>) -> String {
    after.map_or_else(String::new, |s| format!(" (retry after {s}s)"))
}

/// A failed provider call; every variant names the action.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProviderError {
    /// None of the offerings had capacity.
    #[error("{action}: insufficient capacity for {}", join(offerings))]
    InsufficientCapacity {
        /// The failed call.
        action: Action,
        /// Every offering that was refused.
        offerings: Vec<OfferingKey>,
    },
    /// The instance does not exist (any more).
    #[error("{action}: instance {provider_id} not found")]
    NotFound {
        /// The failed call.
        action: Action,
        /// The id asked for.
        provider_id: String,
    },
    /// The cloud API rate-limited the call.
    #[error("{action}: throttled by the cloud API{}", retry_hint(retry_after_s))]
    Throttled {
        /// The failed call.
        action: Action,
        /// Seconds the cloud asked to wait, if it said.
        retry_after_s: Option<u64>,
    },
    /// The request cannot succeed as made; retrying it unchanged is pointless.
    #[error("{action}: invalid request: {why}")]
    InvalidRequest {
        /// The failed call.
        action: Action,
        /// What is wrong with it.
        why: String,
    },
    /// Anything else (network, authorization, an unexpected API error).
    #[error("{action}: {message}")]
    Other {
        /// The failed call.
        action: Action,
        /// The cloud's message.
        message: String,
    },
}

impl ProviderError {
    /// The call that failed.
    pub fn action(&self) -> Action {
        match self {
            ProviderError::InsufficientCapacity { action, .. }
            | ProviderError::NotFound { action, .. }
            | ProviderError::Throttled { action, .. }
            | ProviderError::InvalidRequest { action, .. }
            | ProviderError::Other { action, .. } => *action,
        }
    }

    /// Whether the same call may succeed later: throttling and unexpected errors are transient;
    /// insufficient capacity needs other offerings, a missing instance stays missing, an invalid
    /// request stays invalid.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::Throttled { .. } | ProviderError::Other { .. }
        )
    }

    /// The error's class, as the `code` label of the cloud API call metric:
    /// `insufficient_capacity`, `not_found`, `throttled`, `invalid_request` or `other`.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::InsufficientCapacity { .. } => "insufficient_capacity",
            ProviderError::NotFound { .. } => "not_found",
            ProviderError::Throttled { .. } => "throttled",
            ProviderError::InvalidRequest { .. } => "invalid_request",
            ProviderError::Other { .. } => "other",
        }
    }
}
