//! The EC2 client under rate limits and retries.
//!
//! The SDK's own retries are switched off (see [`crate::AwsProvider::connect`]) so that every
//! attempt goes through one place: a token bucket per API family, then the call, then a
//! decision whether the error is worth another attempt (throttling, 5xx, timeouts, connection
//! failures) with exponential backoff and full jitter. Counters let tests see what happened.

use std::error::Error as StdError;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use governor::{DefaultDirectRateLimiter, Jitter, Quota, RateLimiter};

use crate::config::{Limits, RetrySettings};
use crate::error::AwsError;

/// Which token bucket a call draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// Describe* calls.
    Describe,
    /// Calls that change something (CreateFleet, TerminateInstances, CreateLaunchTemplate).
    Mutate,
}

/// What the provider's calls went through, for tests and metrics.
#[derive(Debug, Default)]
pub struct CallStats {
    /// Attempts sent, retries included.
    pub attempts: AtomicU64,
    /// Attempts answered with a throttling error.
    pub throttled: AtomicU64,
    /// Attempts that failed transiently (5xx, timeout, connection) and were retried.
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

/// Error codes EC2 (and the AWS query protocol in general) uses for rate limiting.
const THROTTLING_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "BandwidthLimitExceeded",
    "EC2ThrottledException",
    "PriorRequestNotComplete",
    "SlowDown",
];

/// Codes of server-side trouble that a later attempt may not meet.
const TRANSIENT_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
    "RequestTimeoutException",
];

/// How one failed attempt is judged.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) throttled: bool,
    pub(crate) transient: bool,
    pub(crate) credentials: bool,
}

/// The credentials error in `e`'s source chain, rendered, if any.
fn credentials_error(e: &(dyn StdError + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(c) = err.downcast_ref::<CredentialsError>() {
            return Some(DisplayErrorContext(c).to_string());
        }
        cur = err.source();
    }
    None
}

/// Classifies an SDK error. Credentials are never part of an error's text, so the message is
/// safe to log.
pub(crate) fn classify<E>(e: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let text = DisplayErrorContext(e).to_string();
    match e {
        SdkError::ServiceError(ctx) => {
            let code = ctx.err().code().unwrap_or("Unknown").to_string();
            let message = ctx.err().message().unwrap_or("").to_string();
            let throttled = THROTTLING_CODES.contains(&code.as_str());
            // Any 5xx is worth another attempt, except a capacity refusal (EC2 answers
            // InsufficientInstanceCapacity with a 500): that needs other offerings instead.
            let server =
                ctx.raw().status().as_u16() >= 500 && !crate::launch::is_capacity_error(&code);
            let transient = throttled || server || TRANSIENT_CODES.contains(&code.as_str());
            Failure {
                code,
                message,
                throttled,
                transient,
                credentials: false,
            }
        }
        SdkError::TimeoutError(_) => Failure {
            code: "Timeout".into(),
            message: text,
            throttled: false,
            transient: true,
            credentials: false,
        },
        SdkError::DispatchFailure(d) => match credentials_error(e) {
            Some(why) => Failure {
                code: "NoCredentials".into(),
                message: why,
                throttled: false,
                transient: false,
                credentials: true,
            },
            None => Failure {
                code: "DispatchFailure".into(),
                message: text,
                throttled: false,
                transient: d.is_io() || d.is_timeout(),
                credentials: false,
            },
        },
        SdkError::ResponseError(_) => Failure {
            // An answer that did not parse: a proxy's error page, a truncated body. A 5xx from
            // something in between is typical, so try again.
            code: "ResponseError".into(),
            message: text,
            throttled: false,
            transient: true,
            credentials: false,
        },
        _ => Failure {
            code: "ConstructionFailure".into(),
            credentials: credentials_error(e).is_some(),
            message: credentials_error(e).unwrap_or(text),
            throttled: false,
            transient: false,
        },
    }
}

/// The EC2 client with its buckets and retry policy.
pub(crate) struct Api {
    pub(crate) client: aws_sdk_ec2::Client,
    describe: DefaultDirectRateLimiter,
    mutate: DefaultDirectRateLimiter,
    retry: RetrySettings,
    pub(crate) stats: CallStats,
}

fn bucket(per_second: u32, burst: u32) -> DefaultDirectRateLimiter {
    let rate = NonZeroU32::new(per_second.max(1)).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
    RateLimiter::direct(Quota::per_second(rate).allow_burst(burst))
}

impl Api {
    pub(crate) fn new(client: aws_sdk_ec2::Client, limits: &Limits, retry: RetrySettings) -> Self {
        Api {
            client,
            describe: bucket(limits.describe_per_second, limits.describe_burst),
            mutate: bucket(limits.mutate_per_second, limits.mutate_burst),
            retry,
            stats: CallStats::default(),
        }
    }

    /// Runs `f` (one attempt of `operation`) until it succeeds, fails for good, or the attempts
    /// run out. `f` is called afresh per attempt; callers make repeated attempts safe
    /// (idempotency tokens for mutating calls).
    pub(crate) async fn call<T, E, F, Fut>(
        &self,
        family: Family,
        operation: &'static str,
        f: F,
    ) -> Result<T, AwsError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        let limiter = match family {
            Family::Describe => &self.describe,
            Family::Mutate => &self.mutate,
        };
        let mut attempt = 0u32;
        loop {
            // A little jitter keeps callers released together from hitting the API in step.
            limiter
                .until_ready_with_jitter(Jitter::up_to(Duration::from_millis(20)))
                .await;
            self.stats.attempts.fetch_add(1, Ordering::SeqCst);
            let err = match f().await {
                Ok(v) => return Ok(v),
                Err(e) => classify(&e),
            };
            attempt += 1;
            if err.throttled {
                self.stats.throttled.fetch_add(1, Ordering::SeqCst);
            }
            if err.credentials {
                return Err(AwsError::Credentials(err.message));
            }
            if err.transient && attempt < self.retry.max_attempts {
                self.stats.retried.fetch_add(1, Ordering::SeqCst);
                let ceiling = self.retry.ceiling(attempt - 1);
                let delay = ceiling.mul_f64(fastrand::f64());
                tracing::debug!(operation, code = %err.code, attempt, ?delay, "retrying EC2 call");
                tokio::time::sleep(delay).await;
                continue;
            }
            if err.throttled {
                return Err(AwsError::Throttled {
                    operation,
                    code: err.code,
                    attempts: attempt,
                });
            }
            return Err(AwsError::Api {
                operation,
                code: err.code,
                message: err.message,
                transient: err.transient,
            });
        }
    }
}
