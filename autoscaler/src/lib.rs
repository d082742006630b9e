//! The `autoscaler` library: the controller runtime behind `gpu-autoscaler run` (see
//! [`controller`]), shared by the binary and its end-to-end tests.

pub mod aws;
pub mod controller;
#[cfg(feature = "controller")]
pub mod explain;
pub mod gcp;
pub mod replay;

/// A cloud provider that is a cargo feature of this crate (`aws`, `gcp`): the SDKs are most of
/// a clean build, so a build that needs neither (`simulate`, the kwok provider) goes without.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cloud {
    /// EC2 (`provider-aws`, feature `aws`).
    Aws,
    /// Compute Engine (`provider-gcp`, feature `gcp`).
    Gcp,
}

impl Cloud {
    /// The cargo feature, also the `--provider` value.
    pub fn feature(self) -> &'static str {
        match self {
            Cloud::Aws => "aws",
            Cloud::Gcp => "gcp",
        }
    }

    /// Whether this binary carries the provider.
    pub fn built(self) -> bool {
        match self {
            Cloud::Aws => cfg!(feature = "aws"),
            Cloud::Gcp => cfg!(feature = "gcp"),
        }
    }

    /// Refuses a provider this binary was built without, before anything connects.
    ///
    /// # Errors
    /// [`controller::error::Error::NotBuilt`], naming the feature to build with.
    pub fn require(self) -> Result<(), controller::error::Error> {
        if self.built() {
            Ok(())
        } else {
            Err(controller::error::Error::NotBuilt(self.feature()))
        }
    }
}
