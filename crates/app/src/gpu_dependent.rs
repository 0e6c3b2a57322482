//! What a replay for one GPU cannot carry over from a trace recorded on another: torch sizes
//! some of its own allocations by the device it runs on, so the recorded stream holds the
//! recording GPU's sizes. `tune --gpu`/`compare --gpu` name those that may differ between the
//! recorded GPU (from the `NAME.device.json` that `cachalot record` writes beside a snapshot)
//! and the target, or say once that the recording GPU is unknown. The rules (torch 2.15):
//!
//! - cuBLAS workspace, allocated per GEMM through the caching allocator: 8.125 MiB
//!   (`:4096:2:16:8`), 32 MiB on compute capability 9.x, 10.x and 12.x;
//! - FlashAttention's deterministic backward splits its fp32 `dq` accumulator
//!   ⌈SMs / (batch · heads)⌉ ways: it follows the SM count;
//! - cuDNN's benchmark mode tries workspaces up to the largest free cached block, or the
//!   device's free memory: it follows the memory;
//! - Inductor's autotuning allocates an L2-flush buffer of the L2's size;
//! - `scaled_dot_product_attention` picks its backend by compute capability (FlashAttention
//!   from 8.0): below and above that line its workspaces and saved tensors differ.
//!
//! Sources: design/outside-torch-and-versions.md §1.1 and §2.2 (CublasHandlePool.cpp,
//! flash_api.cpp, Conv_v7/v8.cpp, `_inductor/runtime/benchmarking.py`).

use std::path::{Path, PathBuf};

use cachalot_core::config::TorchVersion;
use cachalot_core::format_size;
use serde_json::{Value, json};

use crate::gpus::{Gpu, find};

/// The GPU a trace was recorded on, as its `NAME.device.json` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedGpu {
    /// The name CUDA reported (`torch.cuda.get_device_properties().name`).
    pub name: String,
    /// CUDA's total memory on it, bytes.
    pub total: Option<u64>,
    /// The table's row for it, when the name is in the table.
    pub gpu: Option<&'static Gpu>,
    /// The file it was read from.
    pub from: PathBuf,
}

/// Where `cachalot record` puts the device description of the snapshot at `trace`:
/// `STEM.device.json` (the trace's last extension replaced).
pub fn device_json_path(trace: &Path) -> PathBuf {
    trace.with_extension("device.json")
}

/// The recording GPU of `trace` (of its snapshot device `device`, else its first), from the
/// `STEM.device.json` beside it; `None` when there is none or it cannot be read as one.
pub fn recorded_gpu(trace: &Path, device: Option<u32>) -> Option<RecordedGpu> {
    let (from, v) = device_json(trace)?;
    let devices = v.get("devices")?.as_array()?;
    let d = devices
        .iter()
        .find(|d| {
            device.is_some_and(|n| d.get("index").and_then(Value::as_u64) == Some(u64::from(n)))
        })
        .or_else(|| devices.first())?;
    let name = d.get("name")?.as_str()?.to_string();
    Some(RecordedGpu {
        gpu: find(&name).ok(),
        total: d.get("total_memory").and_then(Value::as_u64),
        name,
        from,
    })
}

/// For a front end with `--gpu NAME` on `trace` (a snapshot's device `device`): the GPU,
/// and what may differ from the GPU that recorded the trace (`None`: nothing, or the same
/// GPU). An unknown name is [`find`]'s error.
pub fn for_trace(
    name: &str,
    trace: Option<&Path>,
    device: Option<u32>,
) -> anyhow::Result<(&'static Gpu, Option<GpuDependent>)> {
    let target = find(name)?;
    let recorded = trace.and_then(|t| recorded_gpu(t, device));
    Ok((target, gpu_dependent(recorded, target)))
}

/// The torch release the trace was recorded with (`torch_version` in its `STEM.device.json`,
/// as `cachalot record` writes it); `None` when the file or the field is missing or not a
/// release cachalot knows.
pub fn recorded_release(trace: &Path) -> Option<TorchVersion> {
    let (_, v) = device_json(trace)?;
    v.get("torch_version")?.as_str()?.parse().ok()
}

/// The `STEM.device.json` beside `trace`, read as JSON: where it is and what it holds; `None`
/// when there is no such regular file (of at most 1 MiB) or it is not JSON.
fn device_json(trace: &Path) -> Option<(PathBuf, Value)> {
    let from = device_json_path(trace);
    let meta = std::fs::metadata(&from).ok()?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return None;
    }
    let v = serde_json::from_str(&std::fs::read_to_string(&from).ok()?).ok()?;
    Some((from, v))
}

/// One allocation that may differ on the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// A short name: `cublas_workspace`, `flash_attention_deterministic_backward`,
    /// `cudnn_benchmark_workspace`, `inductor_l2_flush`, `attention_backend`.
    pub what: &'static str,
    /// On the recording GPU (`None`: unknown).
    pub recorded: Option<String>,
    /// On the target.
    pub target: String,
    /// What follows the GPU, for people.
    pub why: &'static str,
}

/// What may differ between the recording GPU and the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuDependent {
    /// The target GPU (`--gpu`).
    pub target: &'static Gpu,
    /// The recording GPU, if known.
    pub recorded: Option<RecordedGpu>,
    /// The allocations that may differ (every one, when the recording GPU is unknown).
    pub items: Vec<Item>,
}

const CUBLAS_SMALL: u64 = 8_519_680;
const CUBLAS_LARGE: u64 = 32 << 20;

/// torch 2.15's default cuBLAS workspace on compute capability `cc`.
pub fn cublas_workspace(cc: (u32, u32)) -> u64 {
    if matches!(cc.0, 9 | 10 | 12) {
        CUBLAS_LARGE
    } else {
        CUBLAS_SMALL
    }
}

fn cc_text(cc: (u32, u32)) -> String {
    format!("sm{}{}", cc.0, cc.1)
}

/// The notes for a trace recorded on `recorded` (`None`: unknown) replayed for `target`;
/// `None` when the recording GPU is the target.
pub fn gpu_dependent(recorded: Option<RecordedGpu>, target: &'static Gpu) -> Option<GpuDependent> {
    let known = recorded.as_ref().and_then(|r| r.gpu);
    if known.is_some_and(|g| g.key() == target.key()) {
        return None;
    }
    let unknown_or = |f: &dyn Fn(&Gpu) -> String| known.map(f);
    let recorded_total = recorded
        .as_ref()
        .and_then(|r| r.total.or(r.gpu.map(|g| g.usable)));
    let mut items = Vec::new();
    let mut add = |what, rec: Option<String>, tgt: String, differs: bool, why| {
        if differs {
            items.push(Item {
                what,
                recorded: rec,
                target: tgt,
                why,
            });
        }
    };
    // In MiB to the byte: 8.125, not format_size's 8.12.
    let cublas = |g: &Gpu| {
        let mib = cublas_workspace(g.cc) as f64 / (1 << 20) as f64;
        format!("{mib} MiB on {}", cc_text(g.cc))
    };
    add(
        "cublas_workspace",
        unknown_or(&cublas),
        cublas(target),
        known.is_none_or(|g| cublas_workspace(g.cc) != cublas_workspace(target.cc)),
        "cuBLAS's workspace, allocated per GEMM through the caching allocator, is sized by \
         the compute capability",
    );
    let sms = |g: &Gpu| format!("{} SMs", g.sms);
    add(
        "flash_attention_deterministic_backward",
        unknown_or(&sms),
        sms(target),
        known.is_none_or(|g| g.sms != target.sms),
        "FlashAttention's deterministic backward splits its fp32 dq accumulator by the SM \
         count",
    );
    add(
        "cudnn_benchmark_workspace",
        recorded_total.map(format_size),
        format_size(target.usable),
        recorded_total.is_none_or(|t| t != target.usable),
        "cuDNN's benchmark mode tries workspaces up to the largest free block or the device's \
         free memory",
    );
    let l2 = |g: &Gpu| format!("{} L2", format_size(g.l2));
    add(
        "inductor_l2_flush",
        unknown_or(&l2),
        l2(target),
        known.is_none_or(|g| g.l2 != target.l2),
        "Inductor's autotuning (torch.compile) allocates an L2-flush buffer of the L2's size",
    );
    let backend = |g: &Gpu| {
        let b = if g.cc.0 >= 8 {
            "FlashAttention available"
        } else {
            "no FlashAttention"
        };
        format!("{} ({b})", cc_text(g.cc))
    };
    add(
        "attention_backend",
        unknown_or(&backend),
        backend(target),
        known.is_none_or(|g| (g.cc.0 >= 8) != (target.cc.0 >= 8)),
        "scaled_dot_product_attention picks its backend by compute capability (FlashAttention \
         from 8.0), and with it its workspaces and saved tensors",
    );
    if items.is_empty() {
        return None;
    }
    Some(GpuDependent {
        target,
        recorded,
        items,
    })
}

impl GpuDependent {
    /// The recording GPU for people.
    fn recorded_text(&self) -> String {
        match &self.recorded {
            Some(r) => match r.gpu {
                Some(g) => format!("{} ({})", r.name, g.key()),
                None => format!("{} (not in the GPU table)", r.name),
            },
            None => "an unknown GPU".to_string(),
        }
    }

    /// The lines for the report's notes.
    pub fn lines(&self) -> Vec<String> {
        let target = self.target.key();
        let mut out = Vec::new();
        match &self.recorded {
            None => out.push(format!(
                "GPU-dependent allocations: the trace does not say which GPU recorded it (no \
                 .device.json beside it, as `cachalot record` writes); torch sizes some \
                 allocations by the GPU, and the replay keeps the recorded ones, which may \
                 differ on the {target}: {}",
                self.items
                    .iter()
                    .map(|i| i.what.replace('_', " "))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(_) => {
                out.push(format!(
                    "GPU-dependent allocations: recorded on {}, replayed for the {target}; \
                     the replay keeps the recorded sizes of what torch sizes by the GPU, which \
                     may differ:",
                    self.recorded_text()
                ));
                for i in &self.items {
                    out.push(format!(
                        "  {}: {} -> {}: {}",
                        i.what.replace('_', " "),
                        i.recorded.as_deref().unwrap_or("unknown"),
                        i.target,
                        i.why
                    ));
                }
            }
        }
        out
    }

    /// `--json`'s `gpu_dependent`.
    pub fn json(&self) -> Value {
        json!({
            "target": self.target.key(),
            "recorded": self.recorded.as_ref().map(|r| json!({
                "name": r.name,
                "key": r.gpu.map(Gpu::key),
                "total_memory": r.total,
                "from": r.from.display().to_string(),
            })),
            "items": self.items.iter().map(|i| json!({
                "what": i.what,
                "recorded": i.recorded,
                "target": i.target,
                "why": i.why,
            })).collect::<Vec<_>>(),
        })
    }
}
