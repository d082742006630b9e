//! The Compute Engine clients under rate limits and retries.
//!
//! The client library's own retries are switched off (`NeverRetry`) so that every attempt goes
//! through one place: a token bucket per call family, then the call under a timeout, then a
//! decision whether the error is worth another attempt (429, 5xx, timeouts, connection
//! failures) with the shared exponential backoff and full jitter of
//! [`providers::common::RetrySettings`]. Counters let tests see what happened.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use google_cloud_compute_v1::client::{
    AcceleratorTypes, Instances, MachineTypes, RegionOperations, ResourcePolicies, ZoneOperations,
};
use google_cloud_gax::error::Error as GaxError;
use google_cloud_gax::error::rpc::{Code, StatusDetails};
use google_cloud_gax::retry_policy::NeverRetry;
use governor::{DefaultDirectRateLimiter, Jitter, Quota, RateLimiter};
use providers::common::{RateLimit, RetrySettings};

use crate::config::GcpSettings;
use crate::error::GcpError;

/// Which token bucket a call draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// get, list, aggregatedList, operation polls.
    Read,
    /// insert, bulkInsert, delete.
    Mutate,
}

/// What the provider's calls went through, for tests and metrics.
#[derive(Debug, Default)]
pub struct CallStats {
    /// Attempts sent, retries included.
    pub attempts: AtomicU64,
    /// Attempts answered with a rate-limit error.
    pub throttled: AtomicU64,
    /// Attempts that failed transiently and were retried.
    pub retried: AtomicU64,
}

impl CallStats {
    /// `(attempts, throttled, retried)` as plain numbers.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.attempts.load(Ordering::SeqCst),
            self.throttled.load(Ordering::SeqCst),
            self.retried.load(Ordering::SeqCst),
        )
    }
}

/// How one failed attempt is judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// HTTP status, when the API answered.
    pub(crate) http: Option<u16>,
    /// The first `errors[].reason` of the answer (`alreadyExists`, `rateLimitExceeded`), or
    /// the status name, or a transport category.
    pub(crate) reason: String,
    /// The API's message.
    pub(crate) message: String,
    /// Rate limited.
    pub(crate) throttled: bool,
    /// Worth another attempt.
    pub(crate) transient: bool,
    /// Credentials could not be obtained.
    pub(crate) credentials: bool,
}

/// Reasons Compute Engine gives for rate limiting in `errors[].reason`.
const THROTTLING_REASONS: &[&str] = &["rateLimitExceeded", "userRateLimitExceeded"];

/// Classifies a client error. Credentials are never part of an error's text, so the message is
/// safe to log.
pub(crate) fn classify(e: &GaxError) -> Failure {
    let http = e.http_status_code();
    let status = e.status();
    let reason = status
        .and_then(|s| {
            s.details.iter().find_map(|d| match d {
                StatusDetails::ErrorInfo(i) if !i.reason.is_empty() => Some(i.reason.clone()),
                _ => None,
            })
        })
        .or_else(|| {
            status
                .map(|s| s.code)
                .filter(|c| *c != Code::Unknown)
                .map(|c| c.name().to_string())
        });
    let message = status.map_or_else(|| e.to_string(), |s| s.message.clone());
    if e.is_authentication() {
        // The causes say what is wrong with the credentials (a key that does not parse, a
        // metadata server that does not answer); the auth library keeps key material out of
        // its messages.
        let mut message = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            message.push_str(": ");
            message.push_str(&c.to_string());
            cause = c.source();
        }
        return Failure {
            http,
            reason: "credentials".into(),
            message,
            throttled: false,
            transient: false,
            credentials: true,
        };
    }
    if let Some(code) = http {
        let throttled = code == 429
            || reason
                .as_deref()
                .is_some_and(|r| THROTTLING_REASONS.contains(&r));
        return Failure {
            http,
            reason: reason.unwrap_or_else(|| code.to_string()),
            message,
            throttled,
            transient: throttled || code >= 500 || code == 408,
            credentials: false,
        };
    }
    let (reason, transient) = if e.is_timeout() {
        ("timeout", true)
    } else if e.is_connect() || e.is_io() || e.is_transport() {
        ("connection", true)
    } else if e.is_deserialization() {
        // An answer that did not parse: a proxy's error page, a truncated body.
        ("response", true)
    } else {
        ("client", false)
    };
    Failure {
        http,
        reason: reason.into(),
        message,
        throttled: false,
        transient,
        credentials: false,
    }
}

/// The Compute clients with their buckets and retry policy.
pub(crate) struct Api {
    pub(crate) instances: Instances,
    pub(crate) machine_types: MachineTypes,
    pub(crate) accelerator_types: AcceleratorTypes,
    pub(crate) operations: ZoneOperations,
    pub(crate) region_operations: RegionOperations,
    pub(crate) resource_policies: ResourcePolicies,
    read: DefaultDirectRateLimiter,
    mutate: DefaultDirectRateLimiter,
    retry: RetrySettings,
    attempt_timeout: Duration,
    pub(crate) stats: CallStats,
}

fn bucket(l: RateLimit) -> DefaultDirectRateLimiter {
    let rate = NonZeroU32::new(l.per_second.max(1)).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(l.burst.max(1)).unwrap_or(NonZeroU32::MIN);
    RateLimiter::direct(Quota::per_second(rate).allow_burst(burst))
}

/// Builds one client of the library: the endpoint when given, the credentials, no retries of
/// its own.
macro_rules! client {
    ($ty:ty, $settings:expr, $creds:expr) => {{
        let mut b = <$ty>::builder()
            .with_credentials($creds.clone())
            .with_retry_policy(NeverRetry);
        if let Some(url) = &$settings.endpoint_url {
            b = b.with_endpoint(url.trim_end_matches('/'));
        }
        b.build()
            .await
            .map_err(|e| GcpError::Config(format!("building the Compute client: {e}")))?
    }};
}

impl Api {
    /// Builds the clients. Credentials: anonymous for fakes and emulators, else Application
    /// Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, the gcloud ADC file, or the
    /// metadata server, which is how GKE workload identity arrives).
    pub(crate) async fn connect(settings: &GcpSettings) -> Result<Self, GcpError> {
        let creds = if settings.is_anonymous() {
            google_cloud_auth::credentials::anonymous::Builder::new().build()
        } else {
            google_cloud_auth::credentials::Builder::default()
                .build()
                .map_err(|e| GcpError::Credentials(e.to_string()))?
        };
        Ok(Api {
            instances: client!(Instances, settings, creds),
            machine_types: client!(MachineTypes, settings, creds),
            accelerator_types: client!(AcceleratorTypes, settings, creds),
            operations: client!(ZoneOperations, settings, creds),
            region_operations: client!(RegionOperations, settings, creds),
            resource_policies: client!(ResourcePolicies, settings, creds),
            read: bucket(settings.limits.read),
            mutate: bucket(settings.limits.mutate),
            retry: settings.retry.clone(),
            attempt_timeout: Duration::from_millis(settings.timeouts.attempt_ms.max(1)),
            stats: CallStats::default(),
        })
    }

    /// Runs `f` (one attempt of `operation`) until it succeeds, fails for good, or the attempts
    /// run out. `f` is called afresh per attempt; callers make repeated attempts safe (request
    /// ids for mutating calls). A failure that is not worth retrying comes back as
    /// `Err(Err(failure))` for the caller to interpret (404, 409, quota...).
    pub(crate) async fn call<T, F, Fut>(
        &self,
        family: Family,
        operation: &'static str,
        f: F,
    ) -> Result<Result<T, Failure>, GcpError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, GaxError>>,
    {
        let limiter = match family {
            Family::Read => &self.read,
            Family::Mutate => &self.mutate,
        };
        let mut attempt = 0u32;
        loop {
            // A little jitter keeps callers released together from hitting the API in step.
            limiter
                .until_ready_with_jitter(Jitter::up_to(Duration::from_millis(20)))
                .await;
            self.stats.attempts.fetch_add(1, Ordering::SeqCst);
            let failure = match tokio::time::timeout(self.attempt_timeout, f()).await {
                Ok(Ok(v)) => return Ok(Ok(v)),
                Ok(Err(e)) => classify(&e),
                Err(_) => Failure {
                    http: None,
                    reason: "timeout".into(),
                    message: format!("no answer within {:?}", self.attempt_timeout),
                    throttled: false,
                    transient: true,
                    credentials: false,
                },
            };
            attempt += 1;
            if failure.throttled {
                self.stats.throttled.fetch_add(1, Ordering::SeqCst);
            }
            if failure.credentials {
                return Err(GcpError::Credentials(failure.message));
            }
            if failure.transient && self.retry.may_retry(attempt) {
                self.stats.retried.fetch_add(1, Ordering::SeqCst);
                let delay = self.retry.delay(attempt - 1, fastrand::f64());
                tracing::debug!(operation, reason = %failure.reason, attempt, ?delay, "retrying Compute call");
                tokio::time::sleep(delay).await;
                continue;
            }
            if failure.throttled {
                return Err(GcpError::Throttled {
                    operation,
                    attempts: attempt,
                    message: failure.message,
                });
            }
            if failure.transient {
                return Err(GcpError::Api {
                    operation,
                    code: failure.reason,
                    message: failure.message,
                    transient: true,
                });
            }
            return Ok(Err(failure));
        }
    }

    /// [`Self::call`] where every failure is an error.
    pub(crate) async fn call_ok<T, F, Fut>(
        &self,
        family: Family,
        operation: &'static str,
        f: F,
    ) -> Result<T, GcpError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, GaxError>>,
    {
        self.call(family, operation, f)
            .await?
            .map_err(|failure| api_error(operation, failure))
    }
}

/// A failure as the crate's error.
pub(crate) fn api_error(operation: &'static str, f: Failure) -> GcpError {
    GcpError::Api {
        operation,
        code: f.reason,
        message: f.message,
        transient: f.transient,
    }
}
