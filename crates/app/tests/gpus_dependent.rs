//! `tune --gpu`/`compare --gpu` on a trace recorded on another GPU name the allocations torch
//! sizes by the GPU (cuBLAS workspace, FlashAttention's deterministic backward, cuDNN's
//! benchmark workspace, Inductor's L2-flush buffer, the attention backend), only those that
//! differ, nothing for the same GPU, and say once when the recording GPU is unknown.

use std::path::PathBuf;

use cachalot_app::gpu_dependent::{
    RecordedGpu, cublas_workspace, for_trace, gpu_dependent, recorded_gpu,
};
use cachalot_app::gpus::find;
use cachalot_app::tune::{TuneRequest, tune};
use cachalot_app::workload::{AdvisorOptions, BUNDLED_TRACE};

fn on(key: &str) -> Option<RecordedGpu> {
    let g = find(key).unwrap();
    Some(RecordedGpu {
        name: g.device_name.to_string(),
        total: Some(g.usable),
        gpu: Some(g),
        from: PathBuf::from("x.device.json"),
    })
}

fn whats(key: Option<&str>, target: &str) -> Vec<&'static str> {
    gpu_dependent(key.and_then(on), find(target).unwrap())
        .map(|d| d.items.iter().map(|i| i.what).collect())
        .unwrap_or_default()
}

#[test]
fn only_what_differs_is_named() {
    assert_eq!(cublas_workspace((8, 6)), 8_519_680);
    assert_eq!(cublas_workspace((9, 0)), 32 << 20);
    assert_eq!(cublas_workspace((12, 0)), 32 << 20);
    assert_eq!(
        whats(Some("rtx3090"), "h100"),
        [
            "cublas_workspace",
            "flash_attention_deterministic_backward",
            "cudnn_benchmark_workspace",
            "inductor_l2_flush"
        ]
    );
    // Same memory, L2 and architecture: only the SM count differs.
    assert_eq!(
        whats(Some("h100"), "h100-pcie"),
        ["flash_attention_deterministic_backward"]
    );
    // Across the FlashAttention line the attention backend changes too.
    assert!(whats(Some("v100-16gb"), "a100-40gb").contains(&"attention_backend"));
    assert!(whats(Some("h100"), "h100").is_empty());
    let d = gpu_dependent(on("rtx3090"), find("h100").unwrap()).unwrap();
    let text = d.lines().join("\n");
    assert!(
        text.contains("recorded on NVIDIA GeForce RTX 3090 (rtx3090)"),
        "{text}"
    );
    assert!(
        text.contains("8.125 MiB on sm86 -> 32 MiB on sm90"),
        "{text}"
    );
    assert!(text.contains("82 SMs -> 132 SMs"), "{text}");
}

#[test]
fn an_unknown_recording_gpu_is_said_once() {
    let d = gpu_dependent(None, find("rtx4090").unwrap()).unwrap();
    assert_eq!(d.items.len(), 5);
    let lines = d.lines();
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].contains("does not say which GPU recorded it") && lines[0].contains("rtx4090"),
        "{}",
        lines[0]
    );
    assert!(d.json()["recorded"].is_null());
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cachalot-gpus-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_recording_gpu_comes_from_the_device_json_beside_the_trace() {
    let d = scratch("read");
    let trace = d.join("snap.pickle");
    std::fs::write(
        d.join("snap.device.json"),
        r#"{"devices": [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "total_memory": 25286672384},
                        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "total_memory": 84939898880}],
            "alloc_conf": ""}"#,
    )
    .unwrap();
    let r = recorded_gpu(&trace, None).unwrap();
    assert_eq!(
        (r.gpu.unwrap().key(), r.total),
        ("rtx3090", Some(25_286_672_384))
    );
    assert_eq!(
        recorded_gpu(&trace, Some(1)).unwrap().gpu.unwrap().key(),
        "h100"
    );
    // A name not in the table is kept, with its memory; the rest is unknown.
    std::fs::write(
        d.join("other.device.json"),
        r#"{"devices": [{"index": 0, "name": "NVIDIA Future 9000", "total_memory": 5}]}"#,
    )
    .unwrap();
    let r = recorded_gpu(&d.join("other.pickle"), None).unwrap();
    assert!(r.gpu.is_none() && r.name == "NVIDIA Future 9000");
    let g = gpu_dependent(Some(r), find("h100").unwrap()).unwrap();
    assert!(
        g.lines()[0].contains("not in the GPU table"),
        "{:?}",
        g.lines()
    );
    // Not JSON, or no device: unknown, never an error.
    std::fs::write(d.join("bad.device.json"), "{not json").unwrap();
    assert!(recorded_gpu(&d.join("bad.pickle"), None).is_none());
    assert!(recorded_gpu(&d.join("none.pickle"), None).is_none());
    std::fs::remove_dir_all(&d).unwrap();
}

fn tune_json(traces: Vec<PathBuf>, gpu: &str) -> serde_json::Value {
    let req = TuneRequest {
        traces,
        capacity: None,
        min_capacity: false,
        top: 1,
        release: None,
        common: AdvisorOptions {
            gpu: Some(gpu.to_string()),
            threads: Some(2),
            ..AdvisorOptions::default()
        },
    };
    let r = tune(&req, None, &mut |_| {}).unwrap();
    let text = r.text();
    let v = r.json();
    match &v["gpu_dependent"] {
        serde_json::Value::Null => assert!(!text.contains("GPU-dependent"), "{text}"),
        _ => assert!(text.contains("note: GPU-dependent allocations"), "{text}"),
    }
    v
}

#[test]
fn tune_gpu_names_what_may_differ_in_text_and_json() {
    let d = scratch("tune");
    let trace = d.join("gpt2.csv.gz");
    std::fs::write(&trace, BUNDLED_TRACE).unwrap();
    // No device description: unknown, said once.
    let v = tune_json(vec![trace.clone()], "h100");
    assert!(v["gpu_dependent"]["recorded"].is_null());
    assert_eq!(v["gpu_dependent"]["target"], "h100");
    // Recorded on an RTX 3090, tuned for an H100.
    std::fs::write(
        d.join("gpt2.csv.device.json"),
        r#"{"devices": [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "total_memory": 25286672384}]}"#,
    )
    .unwrap();
    let v = tune_json(vec![trace.clone()], "h100");
    let items = v["gpu_dependent"]["items"].as_array().unwrap();
    assert_eq!(v["gpu_dependent"]["recorded"]["key"], "rtx3090");
    assert_eq!(items[0]["what"], "cublas_workspace");
    assert_eq!(items[0]["target"], "32 MiB on sm90");
    // Tuned for the GPU it was recorded on: nothing to say.
    assert!(tune_json(vec![trace], "3090")["gpu_dependent"].is_null());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn front_ends_get_the_gpu_and_its_notes_in_one_call() {
    let d = scratch("front");
    let trace = d.join("t.csv.gz");
    std::fs::write(&trace, BUNDLED_TRACE).unwrap();
    std::fs::write(
        d.join("t.csv.device.json"),
        r#"{"devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "total_memory": 1}]}"#,
    )
    .unwrap();
    let (g, notes) = for_trace("h100-pcie", Some(&trace), None).unwrap();
    assert_eq!(g.key(), "h100-pcie");
    let items: Vec<_> = notes.unwrap().items.iter().map(|i| i.what).collect();
    assert_eq!(
        items,
        [
            "flash_attention_deterministic_backward",
            "cudnn_benchmark_workspace"
        ]
    );
    assert!(for_trace("h100", Some(&trace), None).unwrap().1.is_none());
    assert!(
        for_trace("h100", None, None)
            .unwrap()
            .1
            .unwrap()
            .recorded
            .is_none()
    );
    let e = for_trace("h1000", Some(&trace), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("'h1000'"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
