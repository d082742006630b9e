//! Options of the AWS provider shared by `gpu-autoscaler run --provider aws` and
//! `gpu-autoscaler catalog --provider aws`, and building the provider from them (feature
//! `aws`; without it the options still parse, so one chart serves every build, and
//! [`crate::Cloud::require`] refuses the provider).

use std::path::PathBuf;

use clap::Args;
#[cfg(feature = "aws")]
use provider_aws::{AwsProvider, AwsSettings};

#[cfg(feature = "aws")]
use crate::controller::error::Error;

/// AWS provider options. Credentials come from the SDK's default chain only (environment,
/// profile, web identity / IRSA, container and instance metadata).
#[derive(Args, Clone, Debug, Default)]
pub struct AwsArgs {
    /// AWS provider settings file (YAML: node classes, limits, retries, price overrides; see
    /// the `provider-aws` crate's `AwsSettings`).
    #[arg(long = "aws-config", env = "GPU_AUTOSCALER_AWS_CONFIG")]
    pub config: Option<PathBuf>,
    /// API endpoint URL, e.g. a local emulator: EC2 for AWS (default: the settings file, then
    /// AWS_ENDPOINT_URL, then the region's endpoint); `--provider gcp` reads it too.
    #[arg(long)]
    pub endpoint_url: Option<String>,
}

#[cfg(feature = "aws")]
impl AwsArgs {
    /// The settings: the file's (or the defaults), with the command line's `region` and
    /// endpoint on top, and `cluster` as the cluster name when given. The region comes from the
    /// subcommand's own `--region` (AWS_REGION and the profile apply when neither the command
    /// line nor the file names one).
    ///
    /// # Errors
    /// [`Error::Config`] for an unreadable or invalid settings file.
    pub fn settings(
        &self,
        region: Option<&str>,
        cluster: Option<&str>,
    ) -> Result<AwsSettings, Error> {
        let mut s = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("reading {}: {e}", path.display())))?;
                AwsSettings::from_yaml(&text)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
            }
            None => AwsSettings::default(),
        };
        if let Some(r) = region.filter(|r| !r.is_empty()) {
            s.region = Some(r.to_string());
        }
        if let Some(u) = &self.endpoint_url {
            s.endpoint_url = Some(u.clone());
        }
        if let Some(c) = cluster {
            s.cluster = c.to_string();
        }
        s.validate().map_err(|e| Error::Config(e.to_string()))?;
        Ok(s)
    }

    /// Connects the provider.
    ///
    /// # Errors
    /// [`Error::Config`] for bad settings or a missing region.
    pub async fn connect(
        &self,
        region: Option<&str>,
        cluster: Option<&str>,
    ) -> Result<AwsProvider, Error> {
        AwsProvider::connect(self.settings(region, cluster)?)
            .await
            .map_err(|e| Error::Config(e.to_string()))
    }
}

#[cfg(all(test, feature = "aws"))]
mod tests {
    use super::*;

    #[test]
    fn command_line_overrides_the_file() {
        let dir = std::env::temp_dir().join(format!("aws-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("aws.yaml");
        std::fs::write(
            &f,
            "region: eu-west-1\ncluster: from-file\ncatalog_ttl_s: 30\n",
        )
        .unwrap();
        let args = AwsArgs {
            config: Some(f.clone()),
            endpoint_url: Some("http://127.0.0.1:1".into()),
        };
        let s = args.settings(Some("us-west-2"), Some("prod")).unwrap();
        assert_eq!(s.region.as_deref(), Some("us-west-2"));
        assert_eq!(s.endpoint_url.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(s.cluster, "prod");
        assert_eq!(s.catalog_ttl_s, 30);
        assert_eq!(
            AwsArgs {
                config: Some(f.clone()),
                ..AwsArgs::default()
            }
            .settings(Some(""), None)
            .unwrap(),
            AwsSettings {
                region: Some("eu-west-1".into()),
                cluster: "from-file".into(),
                catalog_ttl_s: 30,
                ..AwsSettings::default()
            }
        );
        std::fs::write(&f, "regoin: typo\n").unwrap();
        let e = args.settings(None, None).unwrap_err().to_string();
        assert!(e.contains("aws.yaml") && e.contains("regoin"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
