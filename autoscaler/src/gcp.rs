//! Options of the GCP provider shared by `gpu-autoscaler run --provider gcp` and
//! `gpu-autoscaler catalog --provider gcp`, and building the provider from them.
//!
//! The endpoint and region flags are the commands' own (`--endpoint-url`, `--region`, shared
//! with the AWS provider), passed in here, so that one flag serves whichever provider is chosen.
//! Building the provider needs the feature `gcp`; without it the options still parse and
//! [`crate::Cloud::require`] refuses the provider.

use std::path::PathBuf;

use clap::Args;
#[cfg(feature = "gcp")]
use provider_gcp::{GcpProvider, GcpSettings};

#[cfg(feature = "gcp")]
use crate::controller::error::Error;

/// GCP provider options. Credentials come from Application Default Credentials only
/// (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's ADC file, or the metadata server / GKE workload
/// identity); an `http://` endpoint is called without credentials.
#[derive(Args, Clone, Debug, Default)]
pub struct GcpArgs {
    /// GCP provider settings file (YAML: project, region, zones, node classes, limits,
    /// retries, price overrides; see the `provider-gcp` crate's `GcpSettings`).
    #[arg(
        id = "gcp_config",
        long = "gcp-config",
        env = "GPU_AUTOSCALER_GCP_CONFIG"
    )]
    pub config: Option<PathBuf>,
    /// GCP project (default: the settings file, then GOOGLE_CLOUD_PROJECT).
    #[arg(long = "project")]
    pub project: Option<String>,
    /// Only these zones of the region; repeatable (default: the settings file, then every zone
    /// of the region that lists machine types).
    #[arg(long = "zone")]
    pub zones: Vec<String>,
}

/// What the command line says besides [`GcpArgs`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Common<'a> {
    /// Cluster name (instance label).
    pub cluster: Option<&'a str>,
    /// Region.
    pub region: Option<&'a str>,
    /// Compute endpoint.
    pub endpoint_url: Option<&'a str>,
}

#[cfg(feature = "gcp")]
impl GcpArgs {
    /// The settings: the file's (or the defaults), with the command line on top.
    ///
    /// # Errors
    /// [`Error::Config`] for an unreadable or invalid settings file or flags.
    pub fn settings(&self, common: Common<'_>) -> Result<GcpSettings, Error> {
        let mut s = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("reading {}: {e}", path.display())))?;
                GcpSettings::from_yaml(&text)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
            }
            None => GcpSettings::default(),
        };
        if let Some(p) = &self.project {
            s.project = p.clone();
        }
        if !self.zones.is_empty() {
            s.zones = self.zones.clone();
        }
        if let Some(r) = common.region.filter(|r| !r.is_empty()) {
            s.region = r.to_string();
        } else if let Some(z) = s.zones.first() {
            // A zone names its region (`us-east4-a` is in `us-east4`).
            if let Some((region, _)) = z.rsplit_once('-') {
                s.region = region.to_string();
            }
        }
        if let Some(u) = common.endpoint_url {
            s.endpoint_url = Some(u.to_string());
        }
        if let Some(c) = common.cluster {
            s.cluster = c.to_string();
        }
        s.validate().map_err(|e| Error::Config(e.to_string()))?;
        Ok(s)
    }

    /// Connects the provider.
    ///
    /// # Errors
    /// [`Error::Config`] for bad settings, a missing project or unusable credentials.
    pub async fn connect(&self, common: Common<'_>) -> Result<GcpProvider, Error> {
        GcpProvider::connect(self.settings(common)?)
            .await
            .map_err(|e| Error::Config(e.to_string()))
    }
}

#[cfg(all(test, feature = "gcp"))]
mod tests {
    use super::*;

    #[test]
    fn command_line_overrides_the_file() {
        let dir = std::env::temp_dir().join(format!("gcp-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("gcp.yaml");
        std::fs::write(
            &f,
            "project: from-file\nregion: europe-west4\ncluster: c-file\n",
        )
        .unwrap();
        let args = GcpArgs {
            config: Some(f.clone()),
            project: Some("from-flag".into()),
            zones: Vec::new(),
        };
        let s = args.settings(Common::default()).unwrap();
        assert_eq!(
            (s.project.as_str(), s.region.as_str()),
            ("from-flag", "europe-west4")
        );
        assert_eq!(s.cluster, "c-file");
        let s = GcpArgs {
            zones: vec!["us-east4-b".into()],
            ..args.clone()
        }
        .settings(Common {
            cluster: Some("c2"),
            endpoint_url: Some("http://127.0.0.1:1"),
            region: None,
        })
        .unwrap();
        assert_eq!((s.region.as_str(), s.cluster.as_str()), ("us-east4", "c2"));
        assert!(s.is_anonymous());
        let bad = GcpArgs {
            zones: vec!["us-east4-b".into()],
            ..args
        }
        .settings(Common {
            region: Some("us-central1"),
            ..Common::default()
        });
        assert!(bad.is_err(), "zone outside the region");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
