//! `provider-aws`: the AWS EC2 cloud provider of gpu-autoscaler.
//!
//! [`AwsProvider`] implements [`providers::CloudProvider`] with `aws-sdk-ec2`:
//!
//! - **Catalog** ([`catalog`]): `DescribeInstanceTypes` (paginated) for shapes, GPUs and other
//!   accelerators and ENI limits, `DescribeInstanceTypeOfferings` for zones, the embedded
//!   catalog's list prices for on-demand (overridable in the settings) and
//!   `DescribeSpotPriceHistory` for spot; cached for `catalog_ttl_s` on a [`Clock`].
//! - **Launch** ([`launch`]): `CreateFleet` of type `instant` for one instance, one launch
//!   template per node class and boot configuration (created when missing), up to 60
//!   instance-type x zone overrides per request in the claim's order, `price-capacity-optimized`
//!   for spot and `lowest-price` for on-demand, a ClientToken derived from the claim, tags for
//!   cluster, NodePool and NodeClaim. Offerings the fleet refuses for capacity come back in
//!   [`providers::Launched::unavailable`] (or in [`providers::ProviderError::InsufficientCapacity`]
//!   when nothing could be bought) for the caller's [`providers::UnavailableOfferings`]; the
//!   launch itself moves on to the remaining candidates.
//! - **Placement groups**: a launch for a claim with a placement group (one node of a gang over
//!   several nodes) first creates a `cluster` placement group of that name, tagged with the
//!   cluster and its creation time (`InvalidPlacementGroup.Duplicate` is success), and puts
//!   `Placement.GroupName` on every fleet override; when the fleet finds no room inside the
//!   group, the same offerings are asked for outside it (the group is a preference).
//!   [`providers::CloudProvider::collect_placement_groups`] deletes the cluster's groups no
//!   live instance is in, no claim names and older than the grace period.
//! - **Delete / get / list**: `TerminateInstances` (an unknown or terminated instance is
//!   success), `DescribeInstances` by id or by the cluster tag.
//! - **Limits**: a token bucket for describe calls and one for mutating calls, and retries with
//!   jittered exponential backoff on throttling, 5xx, timeouts and connection failures
//!   ([`config::Limits`], [`config::RetrySettings`]). The SDK's own retries are off.
//! - **Credentials** come only from the SDK's default chain (environment, profile, web identity
//!   / IRSA, container and instance metadata) and are never logged.
//!
//! - **Settings** ([`AwsSettings`], YAML): node classes (AMI, subnets, security groups, IAM
//!   profile, disk, API server endpoint), limits, retries, timeouts, cache TTL, price
//!   overrides; [`config::EXAMPLE_SETTINGS`] is a commented example.
//!
//! Spot interruption and rebalance notices are a later issue; [`interruption`] is the seam.

mod api;
pub mod catalog;
mod clock;
pub mod config;
mod error;
pub mod interruption;
pub mod launch;
mod provider;

pub use api::CallStats;
pub use clock::{Clock, FakeClock, SystemClock};
pub use config::AwsSettings;
pub use error::AwsError;
pub use provider::{
    AwsProvider, PLACEMENT_GROUP_CREATED_TAG, ResolvedClass, instance_id, provider_id,
};
