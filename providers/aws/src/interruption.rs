//! Spot interruption and rebalance notices: the seam for a later issue.
//!
//! EC2 announces a spot reclaim two minutes ahead and a rebalance recommendation earlier, through
//! EventBridge (usually drained from an SQS queue). A source of such notices will implement
//! [`NoticeSource`]; the controller will then cordon and drain the node and launch a
//! replacement before the instance goes. Nothing implements it yet.

use std::future::Future;

use crate::error::AwsError;

/// A notice about one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The spot instance will be reclaimed (about two minutes ahead).
    SpotInterruption {
        /// Instance id.
        instance_id: String,
    },
    /// EC2 recommends replacing the spot instance: its risk of interruption rose.
    Rebalance {
        /// Instance id.
        instance_id: String,
    },
    /// A scheduled event (retirement, maintenance) will stop the instance.
    Scheduled {
        /// Instance id.
        instance_id: String,
    },
}

/// Where notices come from (an SQS queue fed by EventBridge, in a later issue).
pub trait NoticeSource: Send + Sync {
    /// Notices received since the last call.
    fn poll(&self) -> impl Future<Output = Result<Vec<Notice>, AwsError>> + Send;
}
