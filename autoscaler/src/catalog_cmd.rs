//! `gpu-autoscaler catalog`: the instance types as the planner will see them (GPU model, count
//! and memory, capacity after kubelet reserve, zones, prices), from a cloud's API or from the
//! embedded catalog. Users check a NodePool against it; tests use `--json`.

use std::collections::BTreeSet;
use std::io::Write;

#[cfg(any(feature = "aws", feature = "gcp"))]
use anyhow::Context as _;
use autoscaler::aws::AwsArgs;
#[cfg(feature = "gcp")]
use autoscaler::gcp::Common;
use autoscaler::gcp::GcpArgs;
use autoscaler_core::{CapacityType, GpuSpec, InstanceType, Resources};
use clap::ValueEnum;
use serde::Serialize;

/// Where the catalog comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CatalogSource {
    /// AWS EC2's API (DescribeInstanceTypes and friends, spot price history).
    Aws,
    /// Google Compute Engine's API (machineTypes and acceleratorTypes per zone; `--project`,
    /// `--zone`, `--gcp-config`, `--endpoint-url`).
    Gcp,
    /// The catalog embedded in the binary (AWS and GCP list prices; what `simulate` and the
    /// kwok and fake providers use).
    Embedded,
}

/// Options of `catalog`.
#[derive(clap::Args, Debug)]
pub(crate) struct CatalogArgs {
    /// Where the instance types come from.
    #[arg(long, value_enum, default_value = "aws")]
    provider: CatalogSource,
    /// AWS region (default: the settings file, then AWS_REGION / AWS_DEFAULT_REGION, then the
    /// profile); GCP region (default: the settings file, then the `--zone`s' region, then
    /// us-central1).
    #[arg(long)]
    region: Option<String>,
    /// AWS options.
    #[command(flatten)]
    aws: AwsArgs,
    /// GCP options.
    #[command(flatten)]
    gcp: GcpArgs,
    /// As seen by this node class of the AWS settings (its zones, AMI architectures, disk);
    /// region-wide when absent.
    #[arg(long)]
    class: Option<String>,
    /// Only types whose name matches one of these EC2 patterns (`g5.*`, `p5.48xlarge`);
    /// repeatable. Narrows what is asked of the API.
    #[arg(long = "instance-type")]
    instance_types: Vec<String>,
    /// Only types with GPUs or other accelerators.
    #[arg(long)]
    gpus_only: bool,
    /// Print JSON (one array of objects) instead of a table.
    #[arg(long)]
    json: bool,
}

/// One instance type in the JSON output. Resource amounts use the core's units: CPU in
/// millicores, memory and ephemeral storage in bytes, everything else in whole units.
#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    arch: &'a str,
    gpu: Option<&'a GpuSpec>,
    capacity: &'a Resources,
    /// Capacity less kubelet/system reserve and eviction thresholds.
    allocatable: Resources,
    zones: Vec<&'a str>,
    on_demand_price: Option<f64>,
    spot_price: Option<f64>,
    labels: &'a autoscaler_core::Labels,
    offerings: &'a [autoscaler_core::Offering],
}

fn min_price(t: &InstanceType, ct: CapacityType) -> Option<f64> {
    t.offerings
        .iter()
        .filter(|o| o.capacity_type == ct)
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

fn glob(pattern: &str, name: &str) -> bool {
    // EC2-style patterns: `*` any run, `?` any one character.
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// Runs `catalog`. A closed pipe (`| head`) ends the output quietly.
pub(crate) fn run(args: CatalogArgs) -> anyhow::Result<()> {
    match print(args) {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        r => r,
    }
}

fn print(args: CatalogArgs) -> anyhow::Result<()> {
    let mut types = match args.provider {
        CatalogSource::Embedded => providers::catalog::default_catalog(),
        CatalogSource::Aws => aws_types(&args)?,
        CatalogSource::Gcp => gcp_types(&args)?,
    };
    if !args.instance_types.is_empty() {
        types.retain(|t| args.instance_types.iter().any(|p| glob(p, &t.name)));
    }
    if args.gpus_only {
        types.retain(|t| t.gpu.is_some());
    }
    types.sort_by(|a, b| a.name.cmp(&b.name));

    let mut out = std::io::stdout().lock();
    if args.json {
        return write_json(&mut out, &types);
    }
    print_table(&mut out, &types)?;
    Ok(())
}

/// A current-thread runtime for one cloud call.
#[cfg(any(feature = "aws", feature = "gcp"))]
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// `--provider aws`: EC2's instance types.
#[cfg(feature = "aws")]
fn aws_types(args: &CatalogArgs) -> anyhow::Result<Vec<InstanceType>> {
    runtime()?.block_on(async {
        let mut settings = args.aws.settings(args.region.as_deref(), None)?;
        if !args.instance_types.is_empty() {
            settings.instance_types = args.instance_types.clone();
        }
        let p = provider_aws::AwsProvider::connect(settings)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        p.catalog(args.class.as_deref())
            .await
            .map_err(|e| anyhow::anyhow!("AWS catalog ({}): {e}", p.region()))
    })
}

/// `--provider gcp`: Compute Engine's machine types.
#[cfg(feature = "gcp")]
fn gcp_types(args: &CatalogArgs) -> anyhow::Result<Vec<InstanceType>> {
    runtime()?.block_on(async {
        let p = args
            .gcp
            .connect(Common {
                cluster: None,
                region: args.region.as_deref(),
                endpoint_url: args.aws.endpoint_url.as_deref(),
            })
            .await?;
        let class = args
            .class
            .as_deref()
            .unwrap_or(provider_gcp::config::DEFAULT_CLASS);
        let built = p
            .catalog(class)
            .await
            .map_err(|e| anyhow::anyhow!("GCP catalog ({}): {e}", p.settings().project))?;
        // Said on stderr so that `--json` stays one document.
        if !built.unpriced.is_empty() {
            eprintln!("left out, no list price: {}", built.unpriced.join(", "));
        }
        if !built.unknown_accelerators.is_empty() {
            eprintln!(
                "left out, unknown accelerator: {}",
                built.unknown_accelerators.join(", ")
            );
        }
        Ok::<_, anyhow::Error>(built.types)
    })
}

/// Without the `aws` feature: the error naming it.
#[cfg(not(feature = "aws"))]
fn aws_types(_: &CatalogArgs) -> anyhow::Result<Vec<InstanceType>> {
    Err(autoscaler::controller::error::Error::NotBuilt(autoscaler::Cloud::Aws.feature()).into())
}

/// Without the `gcp` feature: the error naming it.
#[cfg(not(feature = "gcp"))]
fn gcp_types(_: &CatalogArgs) -> anyhow::Result<Vec<InstanceType>> {
    Err(autoscaler::controller::error::Error::NotBuilt(autoscaler::Cloud::Gcp.feature()).into())
}

/// Writes `types` as the `--json` document, which `run --catalog-file` and `validate
/// --catalog-file` read back ([`providers::catalog::parse_json_rows`]).
fn write_json(out: &mut impl Write, types: &[InstanceType]) -> anyhow::Result<()> {
    let rows: Vec<Row<'_>> = types
        .iter()
        .map(|t| Row {
            name: &t.name,
            arch: &t.arch,
            gpu: t.gpu.as_ref(),
            capacity: &t.capacity,
            allocatable: t.allocatable(),
            zones: t
                .offerings
                .iter()
                .map(|o| o.zone.as_str())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            on_demand_price: min_price(t, CapacityType::OnDemand),
            spot_price: min_price(t, CapacityType::Spot),
            labels: &t.labels,
            offerings: &t.offerings,
        })
        .collect();
    serde_json::to_writer_pretty(&mut *out, &rows)?;
    writeln!(out)?;
    Ok(())
}

fn gib(bytes: i64) -> String {
    format!("{:.1}Gi", bytes as f64 / f64::from(1u32 << 30))
}

fn price(p: Option<f64>) -> String {
    // Shortest exact rendering: list prices have up to six decimals, spot prices more.
    p.map_or_else(|| "-".into(), |p| format!("{p}"))
}

fn print_table(out: &mut impl std::io::Write, types: &[InstanceType]) -> std::io::Result<()> {
    let header = [
        "NAME",
        "ARCH",
        "GPU",
        "N",
        "GPU-MEM",
        "RESOURCE",
        "CPU",
        "MEMORY",
        "ALLOC-CPU",
        "ALLOC-MEM",
        "PODS",
        "ZONES",
        "ON-DEMAND",
        "SPOT",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for t in types {
        let a = t.allocatable();
        let zones: BTreeSet<&str> = t.offerings.iter().map(|o| o.zone.as_str()).collect();
        let g = t.gpu.as_ref();
        rows.push(vec![
            t.name.clone(),
            t.arch.clone(),
            g.map_or_else(|| "-".into(), |g| g.model.clone()),
            g.map_or_else(|| "-".into(), |g| g.count.to_string()),
            g.map_or_else(|| "-".into(), |g| format!("{}Mi", g.memory_mib)),
            g.map_or_else(|| "-".into(), |g| g.resource.clone()),
            format!("{}", t.capacity.cpu / 1000),
            gib(t.capacity.memory),
            format!("{}m", a.cpu),
            gib(a.memory),
            t.capacity.pods.to_string(),
            zones.into_iter().collect::<Vec<_>>().join(","),
            price(min_price(t, CapacityType::OnDemand)),
            price(min_price(t, CapacityType::Spot)),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    writeln!(out, "{} instance types", types.len())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(glob("g5.*", "g5.xlarge"));
        assert!(!glob("g5.*", "g5g.xlarge"));
        assert!(glob("p?.48xlarge", "p5.48xlarge"));
        assert!(glob("m5.large", "m5.large"));
        assert!(!glob("m5.large", "m5.xlarge"));
    }

    #[test]
    fn table_of_the_embedded_catalog() {
        let types: Vec<_> = providers::catalog::default_catalog()
            .into_iter()
            .filter(|t| t.name == "g5.xlarge")
            .collect();
        let mut buf = Vec::new();
        print_table(&mut buf, &types).unwrap();
        let s = String::from_utf8(buf).unwrap();
        assert!(s.starts_with("NAME "), "{s}");
        assert!(s.contains("g5.xlarge"), "{s}");
        assert!(s.contains("A10G"), "{s}");
        assert!(s.contains("nvidia.com/gpu"), "{s}");
        assert!(s.contains("1.006 "), "{s}");
        assert!(s.trim_end().ends_with("1 instance types"), "{s}");
    }

    #[test]
    fn json_reads_back_as_the_same_instance_types() {
        let mut types = providers::catalog::default_catalog();
        types.sort_by(|a, b| a.name.cmp(&b.name));
        let mut buf = Vec::new();
        write_json(&mut buf, &types).unwrap();
        let back = providers::catalog::parse_json_rows(&String::from_utf8(buf).unwrap())
            .expect("our own output reads back");
        assert_eq!(back.len(), types.len());
        for (a, b) in types.iter().zip(&back) {
            assert_eq!(a, b, "{} changed in the round trip", a.name);
        }
    }

    #[test]
    fn a_scenario_reads_catalog_json_output_as_its_catalog() {
        let mut types = providers::catalog::default_catalog();
        types.retain(|t| t.name.starts_with("g5.") || t.name.starts_with("m5."));
        let dir = std::env::temp_dir().join(format!("gpu-autoscaler-cat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut buf = Vec::new();
        write_json(&mut buf, &types).unwrap();
        std::fs::write(dir.join("mine.json"), buf).unwrap();
        let scenario = dir.join("s.yaml");
        std::fs::write(
            &scenario,
            "duration: 1h\ncatalog: {file: mine.json}\npools:\n  - {name: gpu, families: [g5]}\n",
        )
        .unwrap();
        let s = autoscaler_sim::Scenario::load(&scenario).expect("the scenario loads");
        assert_eq!(
            *s.catalog, types,
            "catalog --json -> scenario catalog file -> same types"
        );
        assert!(
            s.pools[0]
                .instance_types
                .iter()
                .any(|t| t.name == "g5.xlarge")
        );
        let missing = dir.join("bad.yaml");
        std::fs::write(
            &missing,
            "duration: 1h\ncatalog: {file: nope.json}\npools: [{name: a}]\n",
        )
        .unwrap();
        let e = autoscaler_sim::Scenario::load(&missing)
            .unwrap_err()
            .to_string();
        assert!(e.contains("catalog.file") && e.contains("nope.json"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bad_catalog_file_names_the_type_and_field() {
        let mut types = providers::catalog::default_catalog();
        types.retain(|t| t.name == "g5.xlarge");
        types[0].offerings[0].price = -1.0;
        let mut buf = Vec::new();
        write_json(&mut buf, &types).unwrap();
        let err = providers::catalog::parse_json_rows(&String::from_utf8(buf).unwrap())
            .expect_err("a negative price");
        assert_eq!(
            err.to_string(),
            "catalog entry \"g5.xlarge\", field offerings[0].price: -1 is not a positive price"
        );
        let err = providers::catalog::parse_json_rows("[{\"name\": \"x\", \"cpu\": 1}]")
            .expect_err("not the format");
        assert!(err.to_string().contains("unknown field `cpu`"), "{err}");
    }
}
