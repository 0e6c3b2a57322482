//! `tune` recommends for the torch release a snapshot was recorded with (`torch_version` in its
//! `STEM.device.json`, which `cachalot record` writes), unless `--torch` says another; without
//! either, for torch 2.15.

use std::path::PathBuf;

use cachalot_app::tune::{TuneRequest, tune};
use cachalot_app::workload::AdvisorOptions;
use cachalot_core::config::TorchVersion;

/// select_n_multistream at the capacity of its advisor golden: 2.15's best lines set
/// `per_process_memory_fraction`, a key torch 2.9 rejects.
const CAPACITY: u64 = 7_985_954_816;

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cachalot-torch-release-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/traces/select_n_multistream.csv.gz"
    );
    std::fs::copy(fixture, d.join("t.csv.gz")).unwrap();
    d
}

fn ranked(trace: &std::path::Path, release: Option<&str>) -> (String, Vec<String>, String) {
    let req = TuneRequest {
        traces: vec![trace.to_path_buf()],
        capacity: Some(CAPACITY),
        min_capacity: false,
        top: 8,
        release: release.map(|r| r.parse::<TorchVersion>().unwrap()),
        common: AdvisorOptions {
            threads: Some(2),
            ..AdvisorOptions::default()
        },
    };
    let r = tune(&req, None, &mut |_| {}).unwrap();
    let v = r.json();
    let lines = v["ranking"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["PYTORCH_CUDA_ALLOC_CONF"].as_str().unwrap().to_string())
        .collect();
    (v["torch"].as_str().unwrap().to_string(), lines, r.text())
}

#[test]
fn the_recorded_release_is_tuned_for_unless_another_is_asked() {
    let d = scratch();
    let trace = d.join("t.csv.gz");
    let (release, lines, _) = ranked(&trace, None);
    assert_eq!(release, "2.15");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("per_process_memory_fraction"))
    );

    std::fs::write(
        d.join("t.csv.device.json"),
        r#"{"devices": [], "alloc_conf": "", "torch_version": "2.9.1+cu128", "cuda_version": "12.8"}"#,
    )
    .unwrap();
    let (release, lines, text) = ranked(&trace, None);
    assert_eq!(release, "2.9");
    assert!(!lines.is_empty());
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("per_process_memory_fraction")),
        "{lines:?}"
    );
    assert!(
        text.contains("for torch 2.9 (the release the snapshot was recorded with"),
        "{text}"
    );

    // --torch wins over the recording
    let (release, lines, text) = ranked(&trace, Some("2.15"));
    assert_eq!(release, "2.15");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("per_process_memory_fraction"))
    );
    assert!(!text.contains("for torch 2.15"), "{text}");

    // a version cachalot does not know is as good as none
    std::fs::write(
        d.join("t.csv.device.json"),
        r#"{"torch_version": "1.13.1"}"#,
    )
    .unwrap();
    assert_eq!(ranked(&trace, None).0, "2.15");
    std::fs::remove_dir_all(&d).unwrap();
}
