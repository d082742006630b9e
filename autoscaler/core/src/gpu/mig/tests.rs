//! Tests of the MIG table: internal consistency, lookups, and a cross-check against the shared
//! reference file when it is present.

use std::collections::BTreeMap;
use std::path::PathBuf;

use expect_test::expect;

use super::*;

#[test]
fn every_layout_fits_one_gpu() {
    for m in MODELS {
        for config in configs(m) {
            let rows = layout_profiles(m, &config).unwrap();
            let compute: u32 = rows.iter().map(|(p, n)| p.compute_slices * n).sum();
            let memory: u32 = rows.iter().map(|(p, n)| p.memory_slices * n).sum();
            let instances: u32 = rows.iter().map(|(_, n)| n).sum();
            assert!(
                compute <= 7,
                "{} {config}: {compute} compute slices",
                m.name
            );
            assert!(memory <= 8, "{} {config}: {memory} memory slices", m.name);
            assert!(instances <= 7, "{} {config}: {instances} instances", m.name);
        }
        assert_eq!(
            layout_profiles(m, BALANCED).unwrap().len(),
            m.balanced.len(),
            "{}: all-balanced names a profile the model lacks",
            m.name
        );
    }
}

#[test]
fn profile_names_agree_with_their_numbers() {
    for m in MODELS {
        let mut seen = std::collections::BTreeSet::new();
        for p in m.profiles {
            assert!(seen.insert(p.name), "{}: duplicate {}", m.name, p.name);
            let expected = format!(
                "{}g.{}gb{}",
                p.compute_slices,
                p.memory_gb,
                if p.media_extensions { "+me" } else { "" }
            );
            assert_eq!(p.name, expected, "{}", m.name);
            assert!(
                p.memory_mib >= u64::from(p.memory_gb) * 900,
                "{} {}",
                m.name,
                p.name
            );
        }
    }
}

#[test]
fn models_resolve_from_catalog_names_and_memory() {
    let cases = [
        ("A100", 0),
        ("A100", 40960),
        ("A100", 81920),
        ("A100-40GB", 81920),
        ("A100-80GB", 0),
        ("nvidia-a100-80gb", 0),
        ("NVIDIA-A100-SXM4-80GB", 0),
        ("H100", 81920),
        ("H100-NVL", 0),
        ("H100", 96 * 1024),
        ("NVIDIA H100 80GB HBM3", 0),
        ("H200", 144384),
        ("nvidia-h200-141gb", 0),
        ("B200", 183359),
        ("T4", 16384),
        ("L4", 22888),
        ("A10G", 22888),
        ("GB200", 0),
    ];
    let out: String = cases
        .iter()
        .map(|(name, mib)| {
            let m = model_for(name, *mib).map_or("-", |m| m.name);
            format!("{name} @ {mib} MiB -> {m}\n")
        })
        .collect();
    expect![[r#"
        A100 @ 0 MiB -> A100-40GB
        A100 @ 40960 MiB -> A100-40GB
        A100 @ 81920 MiB -> A100-80GB
        A100-40GB @ 81920 MiB -> A100-40GB
        A100-80GB @ 0 MiB -> A100-80GB
        nvidia-a100-80gb @ 0 MiB -> A100-80GB
        NVIDIA-A100-SXM4-80GB @ 0 MiB -> A100-80GB
        H100 @ 81920 MiB -> H100-80GB
        H100-NVL @ 0 MiB -> H100-94GB
        H100 @ 98304 MiB -> -
        NVIDIA H100 80GB HBM3 @ 0 MiB -> H100-80GB
        H200 @ 144384 MiB -> H200-141GB
        nvidia-h200-141gb @ 0 MiB -> H200-141GB
        B200 @ 183359 MiB -> B200
        T4 @ 16384 MiB -> -
        L4 @ 22888 MiB -> -
        A10G @ 22888 MiB -> -
        GB200 @ 0 MiB -> -
    "#]]
    .assert_eq(&out);
}

#[test]
fn layouts_per_model() {
    let out: String = ["A100-40GB", "A100-80GB", "H100", "H200", "B200"]
        .iter()
        .flat_map(|model| {
            [
                "all-1g.10gb",
                "all-1g.10gb.me",
                "all-3g.40gb",
                "all-balanced",
                "all-disabled",
            ]
            .iter()
            .map(move |config| {
                let l = match layout(model, config) {
                    Ok(rows) => format!("{rows:?}"),
                    Err(e) => format!("error: {e}"),
                };
                format!("{model} {config}: {l}\n")
            })
        })
        .collect();
    expect![[r#"
        A100-40GB all-1g.10gb: [("1g.10gb", 4)]
        A100-40GB all-1g.10gb.me: error: unknown MIG configuration "all-1g.10gb.me" for GPU model "A100-40GB"
        A100-40GB all-3g.40gb: error: unknown MIG configuration "all-3g.40gb" for GPU model "A100-40GB"
        A100-40GB all-balanced: [("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)]
        A100-40GB all-disabled: []
        A100-80GB all-1g.10gb: [("1g.10gb", 7)]
        A100-80GB all-1g.10gb.me: [("1g.10gb+me", 1)]
        A100-80GB all-3g.40gb: [("3g.40gb", 2)]
        A100-80GB all-balanced: [("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]
        A100-80GB all-disabled: []
        H100 all-1g.10gb: [("1g.10gb", 7)]
        H100 all-1g.10gb.me: [("1g.10gb+me", 1)]
        H100 all-3g.40gb: [("3g.40gb", 2)]
        H100 all-balanced: [("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]
        H100 all-disabled: []
        H200 all-1g.10gb: error: unknown MIG configuration "all-1g.10gb" for GPU model "H200-141GB"
        H200 all-1g.10gb.me: error: unknown MIG configuration "all-1g.10gb.me" for GPU model "H200-141GB"
        H200 all-3g.40gb: error: unknown MIG configuration "all-3g.40gb" for GPU model "H200-141GB"
        H200 all-balanced: [("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)]
        H200 all-disabled: []
        B200 all-1g.10gb: error: unknown MIG configuration "all-1g.10gb" for GPU model "B200"
        B200 all-1g.10gb.me: error: unknown MIG configuration "all-1g.10gb.me" for GPU model "B200"
        B200 all-3g.40gb: error: unknown MIG configuration "all-3g.40gb" for GPU model "B200"
        B200 all-balanced: [("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)]
        B200 all-disabled: []
    "#]]
    .assert_eq(&out);
}

#[test]
fn known_configs_and_errors() {
    for good in [
        "all-disabled",
        "all-enabled",
        "all-balanced",
        "all-1g.5gb",
        "all-1g.10gb",
        "all-7g.80gb",
        "all-1g.18gb.me",
        "all-3g.90gb",
        "all-7g.94gb",
    ] {
        assert!(is_known_config(good), "{good}");
    }
    for bad in [
        "",
        "all-",
        "all",
        "1g.10gb",
        "all-1g.10gb+me",
        "all-2g.10gb.me",
        "all-8g.80gb",
        "ALL-1G.10GB",
        "custom",
    ] {
        assert!(!is_known_config(bad), "{bad}");
    }
    let e = layout("T4", "all-1g.10gb").unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU sharing on GPU model \"T4\": this GPU does not support MIG (MIG-capable models: \
         A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)"
    );
    assert!(matches!(
        layout("H100", "all-1g.5gb"),
        Err(CoreError::UnknownMigConfig { .. })
    ));
    assert_eq!(profiles("H200").map(<[_]>::len), Some(7));
    assert_eq!(profiles("L40S"), None);
    let h100 = model_for("H100", 0).unwrap();
    assert_eq!(
        profile(h100, "1g.10gb.me").unwrap().resource_name(),
        "nvidia.com/mig-1g.10gb.me"
    );
    assert_eq!(configs(h100).len(), 10);
}

fn reference_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/mig_profiles.json")
}

/// The embedded table must agree with the shared reference file in every fact the file holds.
#[test]
fn table_matches_shared_reference_file() {
    let path = reference_file();
    let Ok(text) = std::fs::read_to_string(&path) else {
        println!("skipped: ../shared/data/mig_profiles.json absent");
        return;
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("reference file is JSON");
    let models = json["models"].as_object().expect("models object");
    let mut checked = Vec::new();
    for (name, facts) in models {
        let ours = by_name(name).unwrap_or_else(|| panic!("model {name} missing from our table"));
        let theirs = facts["profiles"].as_object().expect("profiles object");
        let our_names: Vec<&str> = ours.profiles.iter().map(|p| p.name).collect();
        let mut their_names: Vec<&str> = theirs.keys().map(String::as_str).collect();
        their_names.sort_unstable();
        let mut sorted = our_names.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, their_names, "{name}: profile set");
        for p in ours.profiles {
            let t = &theirs[p.name];
            let num = |k: &str| {
                t[k].as_u64()
                    .unwrap_or_else(|| panic!("{name} {} {k}", p.name))
            };
            assert_eq!(
                u64::from(p.max_instances),
                num("max_instances"),
                "{name} {}",
                p.name
            );
            assert_eq!(
                u64::from(p.memory_gb),
                num("memory_gb"),
                "{name} {}",
                p.name
            );
            assert_eq!(p.memory_mib, num("memory_mib"), "{name} {}", p.name);
            assert_eq!(
                u64::from(p.compute_slices),
                num("compute_slices"),
                "{name} {}",
                p.name
            );
            assert_eq!(
                u64::from(p.memory_slices),
                num("memory_slices"),
                "{name} {}",
                p.name
            );
            assert_eq!(
                Some(p.media_extensions),
                t["media_extensions"].as_bool(),
                "{name} {}",
                p.name
            );
            assert_eq!(
                Some(p.resource_name().as_str()),
                t["k8s_resource_mixed"].as_str(),
                "{name} {}",
                p.name
            );
        }
        let balanced: BTreeMap<String, u64> = json["balanced_layouts"][name]
            .as_object()
            .unwrap_or_else(|| panic!("{name}: no balanced layout"))
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().expect("count")))
            .collect();
        let ours_balanced: BTreeMap<String, u64> = ours
            .balanced
            .iter()
            .map(|(k, v)| (k.to_string(), u64::from(*v)))
            .collect();
        assert_eq!(ours_balanced, balanced, "{name}: all-balanced");
        checked.push(name.as_str());
    }
    let unchecked: Vec<&str> = MODELS
        .iter()
        .map(|m| m.name)
        .filter(|n| !checked.contains(n))
        .collect();
    println!("cross-checked {checked:?}; not in the reference file: {unchecked:?}");
}
