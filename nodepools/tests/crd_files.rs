//! The YAML under `deploy/crds/` must match the types; `UPDATE_CRDS=1` rewrites it.

use std::path::Path;

#[test]
fn deploy_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("nodepools sits in the workspace root")
        .join("deploy/crds");
    let update = std::env::var_os("UPDATE_CRDS").is_some_and(|v| v == "1");
    let mut drifted = Vec::new();
    for f in nodepools::crds::files().expect("CRDs render") {
        let path = dir.join(&f.file_name);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == f.content {
            continue;
        }
        if update {
            std::fs::create_dir_all(&dir).expect("create deploy/crds");
            std::fs::write(&path, &f.content).expect("write CRD file");
        } else {
            let first = current
                .lines()
                .zip(f.content.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| current.lines().count().min(f.content.lines().count()));
            drifted.push(format!(
                "{} (first difference at line {})",
                path.display(),
                first + 1
            ));
        }
    }
    assert!(
        drifted.is_empty(),
        "generated CRDs differ from the files (or the files are missing): {drifted:?}\n\
         regenerate them with `UPDATE_CRDS=1 cargo test -p nodepools --test crd_files` \
         (or `gpu-autoscaler crds --dir deploy/crds`) and commit the result"
    );
}
