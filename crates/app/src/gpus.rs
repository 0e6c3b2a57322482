//! The one GPU table: each model's device memory as CUDA reports it (or NVML's figure where no
//! CUDA total was found, said so), and what a capture needs to pretend to be it (compute
//! capability, SM count, L2, shared memory per SM and its opt-in). `--gpu NAME`, `tune --gpu
//! list`, and the Python package's `cachalot.capture.gpus` all read it (through `_native`).
//!
//! Two kinds of published memory figure are used, each entry naming its source:
//!
//! - CUDA's total (`deviceQuery`'s "Total amount of global memory", the same as
//!   `cudaMemGetInfo`'s total and `torch.cuda.get_device_properties(d).total_memory`): what
//!   a process can allocate at most, below the marketing size;
//! - NVML's `memory.total` (what `nvidia-smi` prints), where no CUDA total was found; CUDA
//!   reports 1-2 % less on the cards where both are known (T4: 15,110 vs 15,360 MiB; A100
//!   40GB: 40,441 vs 40,960 MiB), so these are upper bounds.
//!
//! A process's own CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers come out of this
//! memory too, outside PyTorch's allocator: take them off with `--headroom`. The compute
//! capability, SM count, L2 and shared-memory figures are NVIDIA's spec sheets' (the H100's
//! are those shared/fakegpu's ground-truth runs use).

use anyhow::{Result, bail};
use cachalot_core::format_size;

/// One GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// The names it is looked up by (lower case; the first is its key).
    pub names: &'static [&'static str],
    /// Its name for people.
    pub name: &'static str,
    /// The name CUDA reports for it (`torch.cuda.get_device_name()`), which a capture shows.
    pub device_name: &'static str,
    /// Bytes of device memory (see the module documentation for which total).
    pub usable: u64,
    /// Which total, and where it was published.
    pub source: &'static str,
    /// Compute capability (major, minor).
    pub cc: (u32, u32),
    /// Streaming multiprocessors.
    pub sms: u32,
    /// L2 cache bytes.
    pub l2: u64,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: u64,
    /// The most shared memory one block may opt in to, bytes.
    pub smem_optin: u64,
}

impl Gpu {
    /// Its key (the first name).
    pub fn key(&self) -> &'static str {
        self.names[0]
    }
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const NVML: &str = "NVML memory.total as nvidia-smi reports it, from Modal's table \
                    \"Why does an NVIDIA H100 80GB card offer 85.52 GB?\" (thundergolfer.com); \
                    CUDA reports 1-2 % less";

/// The table, ordered by memory (then key): [`smallest_fitting`] walks it in order.
pub const GPUS: &[Gpu] = &[
    Gpu {
        names: &["t4"],
        name: "NVIDIA Tesla T4",
        device_name: "Tesla T4",
        usable: 15_843_721_216,
        source: "CUDA total, deviceQuery on a Tesla T4: 15843721216 bytes (chiemon.github.io, \
                 NVIDIA card information)",
        cc: (7, 5),
        sms: 40,
        l2: 4 * MIB,
        smem_per_sm: 64 * KIB,
        smem_optin: 64 * KIB,
    },
    Gpu {
        names: &["a10", "a10g"],
        name: "NVIDIA A10",
        device_name: "NVIDIA A10",
        usable: 23_028 * MIB,
        source: NVML,
        cc: (8, 6),
        sms: 72,
        l2: 6 * MIB,
        smem_per_sm: 100 * KIB,
        smem_optin: 99 * KIB,
    },
    Gpu {
        names: &["l4"],
        name: "NVIDIA L4",
        device_name: "NVIDIA L4",
        usable: 23_034 * MIB,
        source: NVML,
        cc: (8, 9),
        sms: 58,
        l2: 48 * MIB,
        smem_per_sm: 100 * KIB,
        smem_optin: 99 * KIB,
    },
    Gpu {
        names: &["a100-40gb", "a100"],
        name: "NVIDIA A100 40GB",
        device_name: "NVIDIA A100-SXM4-40GB",
        usable: 42_405_855_232,
        source: "CUDA total, deviceQuery on an A100 40GB: 42405855232 bytes (Paderborn PC2 \
                 documentation, NVIDIA A100 40GB with NVLINK)",
        cc: (8, 0),
        sms: 108,
        l2: 40 * MIB,
        smem_per_sm: 164 * KIB,
        smem_optin: 163 * KIB,
    },
    Gpu {
        names: &["l40s"],
        name: "NVIDIA L40S",
        device_name: "NVIDIA L40S",
        usable: 46_068 * MIB,
        source: NVML,
        cc: (8, 9),
        sms: 142,
        l2: 96 * MIB,
        smem_per_sm: 100 * KIB,
        smem_optin: 99 * KIB,
    },
    Gpu {
        names: &["h100", "h100-80gb"],
        name: "NVIDIA H100 80GB",
        device_name: "NVIDIA H100 80GB HBM3",
        usable: 81_559 * MIB,
        source: NVML,
        cc: (9, 0),
        sms: 132,
        l2: 48 * MIB,
        smem_per_sm: 228 * KIB,
        smem_optin: 227 * KIB,
    },
    Gpu {
        names: &["a100-80gb"],
        name: "NVIDIA A100 80GB",
        device_name: "NVIDIA A100-SXM4-80GB",
        usable: 81_920 * MIB,
        source: NVML,
        cc: (8, 0),
        sms: 108,
        l2: 40 * MIB,
        smem_per_sm: 164 * KIB,
        smem_optin: 163 * KIB,
    },
    Gpu {
        names: &["h200", "h200-141gb"],
        name: "NVIDIA H200 141GB",
        device_name: "NVIDIA H200",
        usable: 143_771 * MIB,
        source: NVML,
        cc: (9, 0),
        sms: 132,
        l2: 48 * MIB,
        smem_per_sm: 228 * KIB,
        smem_optin: 227 * KIB,
    },
];

/// The GPU called `name` (case and `_`/space insensitive, an `nvidia-` prefix ignored); an
/// unknown name is an error that quotes it and lists the known ones.
pub fn find(name: &str) -> Result<&'static Gpu> {
    let key: String = name
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c == '_' || c == ' ' { '-' } else { c })
        .collect();
    let key = key.strip_prefix("nvidia-").unwrap_or(&key);
    match GPUS.iter().find(|g| g.names.contains(&key)) {
        Some(g) => Ok(g),
        None => {
            let known: Vec<&str> = GPUS.iter().map(Gpu::key).collect();
            bail!(
                "unknown GPU '{name}'; known: {} (or give --capacity SIZE)",
                known.join(", ")
            )
        }
    }
}

/// The GPU with the least memory that still has `need` bytes, if any.
pub fn smallest_fitting(need: u64) -> Option<&'static Gpu> {
    GPUS.iter().find(|g| g.usable >= need)
}

/// The table for people (`tune --gpu list`).
pub fn table_text() -> String {
    let mut out = String::from("GPU          memory      cc   SMs  names\n");
    for g in GPUS {
        out.push_str(&format!(
            "{:<12} {:>10}  {}.{}  {:>3}  {}\n",
            g.key(),
            format_size(g.usable),
            g.cc.0,
            g.cc.1,
            g.sms,
            g.names.join(", ")
        ));
    }
    out.push_str("\nmemory sources:\n");
    for g in GPUS {
        out.push_str(&format!("  {}: {}\n", g.key(), g.source));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_whatever_their_case() {
        assert_eq!(find("H100").unwrap().usable, 81_559 << 20);
        assert_eq!(find("nvidia_a100_80gb").unwrap().name, "NVIDIA A100 80GB");
        assert_eq!(find("T4").unwrap().usable, 15_843_721_216);
        assert_eq!(find("a10g").unwrap().key(), "a10");
        let e = find("h1000").unwrap_err().to_string();
        assert!(e.contains("'h1000'") && e.contains("h100"), "{e}");
    }

    #[test]
    fn every_name_is_unique_and_the_table_is_ordered_by_memory() {
        let mut all: Vec<&str> = GPUS.iter().flat_map(|g| g.names.iter().copied()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(
            GPUS.windows(2)
                .all(|w| (w[0].usable, w[0].key()) < (w[1].usable, w[1].key()))
        );
    }

    #[test]
    fn every_memory_figure_names_its_source() {
        for g in GPUS {
            // A CUDA total quotes the exact bytes it was read as; an NVML figure says so.
            assert!(
                g.source.contains(&g.usable.to_string()) || g.source == NVML,
                "{}: {}",
                g.key(),
                g.source
            );
            assert!(g.smem_optin <= g.smem_per_sm && g.l2 > 0 && g.sms > 0);
        }
    }

    #[test]
    fn smallest_fitting_walks_up_the_table() {
        assert_eq!(smallest_fitting(14 << 30).unwrap().key(), "t4");
        assert_eq!(smallest_fitting(15 << 30).unwrap().key(), "a10");
        assert!(smallest_fitting(1 << 50).is_none());
        assert!(table_text().contains("a100-40gb"));
    }
}
