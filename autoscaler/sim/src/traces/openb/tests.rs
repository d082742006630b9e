//! Loader tests on small inline CSVs written to temporary files.

use std::path::PathBuf;

use super::*;

/// A CSV written to a directory of its own under the temp dir and removed again when dropped.
/// The directory carries the process id and the file name, so neither parallel runs nor
/// parallel tests can remove a directory another test is about to write into.
struct TempCsv(PathBuf);

impl TempCsv {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "autoscaler-sim-openb-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write temp csv");
        TempCsv(path)
    }
}

impl Drop for TempCsv {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0001,96000,393216,8,G2
";

const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
openb-pod-0001,6000,12288,1,460,V100M16|V100M32|V100M32,BE,Pending,427061,12902960,
openb-pod-0002,88000,327680,8,1000,G2,LS,Running,5,,7
openb-pod-0003,4000,8192,0,0,,Burstable,Failed,9,10,9
";

#[test]
fn loads_nodes() {
    let csv = TempCsv::new("nodes_ok.csv", NODES);
    let nodes = load_nodes(&csv.0).unwrap();
    assert_eq!(
        nodes,
        vec![
            NodeRecord {
                name: "openb-node-0000".into(),
                cpu_milli: 32000,
                memory_mib: 262144,
                gpus: 0,
                model: None,
            },
            NodeRecord {
                name: "openb-node-0001".into(),
                cpu_milli: 96000,
                memory_mib: 393216,
                gpus: 8,
                model: Some("G2".into()),
            },
        ]
    );
}

#[test]
fn loads_pods_with_specs_shares_and_optional_times() {
    let csv = TempCsv::new("pods_ok.csv", PODS);
    let pods = load_pods(&csv.0).unwrap();
    assert_eq!(pods.len(), 4);
    assert_eq!(pods[0].gpu_share(), None);
    assert_eq!(pods[0].whole_gpus(), 1);
    assert_eq!(pods[1].gpu_spec, vec!["V100M16", "V100M32"]);
    assert_eq!(pods[1].gpu_share(), Some(460));
    assert_eq!(pods[1].whole_gpus(), 0);
    assert_eq!(pods[1].scheduled_time, None);
    assert_eq!(pods[1].qos, "BE");
    assert_eq!(pods[1].pod_phase, "Pending");
    assert_eq!(pods[2].whole_gpus(), 8);
    assert_eq!(pods[2].gpu_milli_total(), 8000);
    assert_eq!(pods[2].deletion_time, None);
    assert_eq!(pods[2].scheduled_time, Some(7));
    assert_eq!(pods[3].gpu_milli_total(), 0);
    assert!(pods[3].gpu_spec.is_empty());
}

#[test]
fn columns_are_found_by_name_with_crlf_bom_and_quotes() {
    let text = "\u{feff}model,gpu,sn,memory_mib,cpu_milli,extra\r\n\"T4\",2,\"node, one\",1024,8000,x\r\n\r\n";
    let nodes = parse_nodes("inline.csv", text).unwrap();
    assert_eq!(nodes[0].name, "node, one");
    assert_eq!(nodes[0].model.as_deref(), Some("T4"));
    assert_eq!((nodes[0].cpu_milli, nodes[0].gpus), (8000, 2));
}

fn err(name: &str, text: &str, pods: bool) -> String {
    let csv = TempCsv::new(name, text);
    let path = &csv.0;
    let e = if pods {
        load_pods(path).unwrap_err()
    } else {
        load_nodes(path).unwrap_err()
    };
    // Name the file by its base name so the assertion does not depend on the temp dir.
    e.to_string().replace(&path.display().to_string(), name)
}

#[test]
fn missing_column_names_file_line_and_column() {
    let e = err(
        "no_model.csv",
        "sn,cpu_milli,memory_mib,gpu\nn0,1,2,0\n",
        false,
    );
    assert_eq!(e, "no_model.csv:1: missing column \"model\" in the header");
}

#[test]
fn bad_number_names_file_line_and_field() {
    let text = "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,2048,0,\nn1,12k,2048,0,\n";
    let e = err("bad_number.csv", text, false);
    assert_eq!(
        e,
        "bad_number.csv:3: field cpu_milli: \"12k\" is not a number"
    );
}

#[test]
fn negative_value_names_file_line_and_field() {
    let text = PODS.replace("openb-pod-0003,4000,8192", "openb-pod-0003,4000,-8192");
    let e = err("negative.csv", &text, true);
    assert_eq!(e, "negative.csv:5: field memory_mib: -8192 is negative");
}

#[test]
fn out_of_range_shares_are_rejected() {
    let text = PODS.replace("1,460,", "1,1460,");
    let e = err("over.csv", &text, true);
    assert_eq!(
        e,
        "over.csv:3: field gpu_milli: 1460 is above the largest accepted, 1000"
    );
    let text = PODS.replace("4000,8192,0,0,", "4000,8192,0,300,");
    let e = err("share_without_gpu.csv", &text, true);
    assert_eq!(
        e,
        "share_without_gpu.csv:5: field gpu_milli: 300 is a share of a GPU, but num_gpu is 0"
    );
}

#[test]
fn a_deletion_before_the_creation_is_refused() {
    let head = PODS.lines().next().expect("header");
    let text = format!("{head}\np,1000,1024,1,1000,,LS,Running,100,50,0\n");
    let e = err("deleted_first.csv", &text, true);
    assert_eq!(
        e,
        "deleted_first.csv:2: field deletion_time: 50 is before creation_time 100"
    );
    // Equal times occur in the published lists (22 pods): kept.
    let text = format!("{head}\np,1000,1024,1,1000,,LS,Running,100,100,0\n");
    let csv = TempCsv::new("same_time.csv", &text);
    assert_eq!(load_pods(&csv.0).expect("equal times load").len(), 1);
}

#[test]
fn malformed_rows_and_files_are_errors() {
    let e = err(
        "short.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,1,2\n",
        false,
    );
    assert_eq!(e, "short.csv:2: 3 fields, but the header on line 1 names 5");
    let e = err(
        "quote.csv",
        "sn,cpu_milli,memory_mib,gpu,model\n\"n0,1,2,0,\n",
        false,
    );
    assert_eq!(e, "quote.csv:2: unterminated quote in field 1");
    let e = err("empty.csv", "\n\n", false);
    assert_eq!(e, "empty.csv: empty file, expected a header line");
    let e = err(
        "empty_field.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,,2,0,\n",
        false,
    );
    assert_eq!(e, "empty_field.csv:2: field cpu_milli is empty");
}

#[test]
fn unreadable_file_is_an_io_error_naming_it() {
    let path = std::env::temp_dir().join("autoscaler-sim-openb-does-not-exist.csv");
    let e = load_pods(&path).unwrap_err();
    assert!(matches!(e, SimError::Io { .. }));
    assert!(
        e.to_string()
            .contains("autoscaler-sim-openb-does-not-exist.csv")
    );
}
