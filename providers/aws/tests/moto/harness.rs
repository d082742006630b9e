//! Test harness: a moto EC2 server on its own 127.0.0.1 port per test, fake credentials in a
//! profile file (the provider's default chain reads it), and a plain SDK client for setup and
//! inspection.
//!
//! Also used by the `gpu-autoscaler` binary's tests (`autoscaler/tests/aws`) through `#[path]`.

#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_ec2::types::{Filter, Tag};
use provider_aws::AwsSettings;
use provider_aws::config::{DISCOVERY_TAG, NodeClass, RetrySettings, Selector};

/// The region every test uses (moto's default data covers it well).
pub const REGION: &str = "us-east-1";
/// The instance families most tests ask EC2 about (the full catalog takes moto ~6 s to list).
pub const TYPES: &[&str] = &[
    "g5.*", "g5g.*", "g6.*", "g4ad.*", "p4d.*", "inf2.*", "dl1.*", "m5.*", "m7g.*",
];

/// The profile the credentials file holds.
pub const PROFILE: &str = "gpu-autoscaler-test";

/// A running moto server; stopped on drop.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    dir: tempfile::TempDir,
}

/// Whether `moto_server` is on PATH.
pub fn moto_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("moto_server"))
        .find(|p| p.is_file())
}

/// The port werkzeug's start-up line (` * Running on http://127.0.0.1:PORT`) names, once the
/// log holds the whole line (a line still being written could end in half the port).
fn bound_port(log: &str) -> Option<u16> {
    log.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .find_map(|line| {
            let rest = line.split("Running on http://127.0.0.1:").nth(1)?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok().filter(|p| *p != 0)
        })
}

impl Moto {
    /// Starts moto, or prints `SKIPPED: moto_server not found` and returns `None` (the CI
    /// script installs moto, so there the tests always run).
    ///
    /// moto binds port 0 and the harness reads the port it got from its log. Probing a free port
    /// first and handing it over raced with the tests running alongside: two servers could be
    /// given one port, the second failed to bind, and its test talked to the first one's server
    /// until that test ended and stopped it (connection refused half-way through a test).
    pub fn start(test: &str) -> Option<Moto> {
        let Some(bin) = moto_path() else {
            // Straight to the process's stderr: the test harness would swallow `eprintln!` of a
            // passing test, and a skip must be visible.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: moto_server not found ({test}); install it with `pip install 'moto[server]'` (.ci/run does)"
            );
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let log_path = dir.path().join("moto.log");
        let log = std::fs::File::create(&log_path).expect("moto log");
        let mut child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", "0"])
            .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
            // Unbuffered, so the start-up line reaches the log file as soon as it is printed.
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawning moto_server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "moto_server exited ({status}) before serving; log:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some(port) = bound_port(&text)
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                let creds = dir.path().join("credentials");
                let mut f = std::fs::File::create(&creds).expect("credentials file");
                writeln!(
                    f,
                    "[{PROFILE}]\naws_access_key_id = test\naws_secret_access_key = test"
                )
                .expect("write credentials");
                let url = format!("http://127.0.0.1:{port}");
                return Some(Moto { child, url, dir });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "moto_server did not start within 60 s; log:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }

    /// The fake credentials file.
    pub fn credentials_file(&self) -> PathBuf {
        self.dir.path().join("credentials")
    }

    /// A scratch directory that lives as long as the server.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Provider settings against `endpoint` (moto, or a proxy in front of it) for `cluster`,
    /// with fast retries so that fault tests stay quick.
    pub fn settings(&self, endpoint: &str, cluster: &str) -> AwsSettings {
        AwsSettings {
            region: Some(REGION.into()),
            endpoint_url: Some(endpoint.into()),
            profile: Some(PROFILE.into()),
            credentials_file: Some(self.credentials_file()),
            cluster: cluster.into(),
            instance_types: TYPES.iter().map(|t| t.to_string()).collect(),
            retry: RetrySettings {
                max_attempts: 4,
                base_delay_ms: 10,
                max_delay_ms: 100,
            },
            ..AwsSettings::default()
        }
    }

    /// A plain SDK client for setting up and inspecting moto's state.
    pub fn client(&self) -> aws_sdk_ec2::Client {
        let conf = aws_sdk_ec2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(&self.url)
            .credentials_provider(Credentials::new("test", "test", None, None, "harness"))
            .build();
        aws_sdk_ec2::Client::from_conf(conf)
    }

    /// Tags moto's default subnets in `zones` and the default security group for discovery by
    /// `cluster`, tags one x86_64 Amazon Linux AMI, and returns a `default` node class using
    /// them (AMI by tag, subnets and security groups by discovery).
    pub async fn node_class(&self, cluster: &str, zones: &[&str]) -> NodeClass {
        let ec2 = self.client();
        let subnets = ec2
            .describe_subnets()
            .filters(
                Filter::builder()
                    .name("default-for-az")
                    .values("true")
                    .build(),
            )
            .send()
            .await
            .expect("describe subnets");
        let mut ids: Vec<String> = subnets
            .subnets()
            .iter()
            .filter(|s| zones.contains(&s.availability_zone().unwrap_or("")))
            .filter_map(|s| s.subnet_id().map(str::to_string))
            .collect();
        assert_eq!(ids.len(), zones.len(), "a default subnet per zone");
        let sgs = ec2
            .describe_security_groups()
            .filters(
                Filter::builder()
                    .name("group-name")
                    .values("default")
                    .build(),
            )
            .send()
            .await
            .expect("describe security groups");
        ids.extend(
            sgs.security_groups()
                .iter()
                .filter_map(|g| g.group_id().map(str::to_string)),
        );
        let image = self.amd64_ami().await;
        ids.push(image);
        ec2.create_tags()
            .set_resources(Some(ids))
            .tags(Tag::builder().key(DISCOVERY_TAG).value(cluster).build())
            .send()
            .await
            .expect("create tags");
        NodeClass {
            ami: Selector::tag(DISCOVERY_TAG, cluster),
            ..NodeClass::default()
        }
    }

    /// An x86_64 Linux AMI moto knows.
    pub async fn amd64_ami(&self) -> String {
        let images = self
            .client()
            .describe_images()
            .filters(
                Filter::builder()
                    .name("architecture")
                    .values("x86_64")
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("name")
                    .values("amzn-ami-hvm-*")
                    .build(),
            )
            .send()
            .await
            .expect("describe images");
        images
            .images()
            .iter()
            .filter_map(|i| i.image_id().map(str::to_string))
            .min()
            .expect("moto ships an Amazon Linux AMI")
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
