//! Common GPUs by name, for `--gpu`: the device memory CUDA reports on each.
//!
//! Two kinds of published number are used, each entry naming its source:
//!
//! - CUDA's total (`deviceQuery`'s "Total amount of global memory", the same as
//!   `cudaMemGetInfo`'s total and `torch.cuda.get_device_properties(d).total_memory`): what
//!   a process can allocate at most, below the marketing size;
//! - NVML's `memory.total` (what `nvidia-smi` prints), where no CUDA total was found; CUDA
//!   reports 1-2 % less on the cards where both are known (T4: 15,110 vs 15,360 MiB; A100
//!   40GB: 40,441 vs 40,960 MiB), so these are upper bounds.
//!
//! A process's own CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers come out of this
//! memory too, outside PyTorch's allocator: take them off with `--headroom`.

use crate::AdvisorError;

/// One GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// The names it is looked up by (lower case; the first is listed).
    pub names: &'static [&'static str],
    /// Its name for people.
    pub name: &'static str,
    /// Bytes of device memory (see the module documentation for which total).
    pub usable: u64,
    /// Which total, and where it was published.
    pub source: &'static str,
}

const MIB: u64 = 1 << 20;
const NVML: &str = "NVML memory.total as nvidia-smi reports it, from Modal's table \
                    \"Why does an NVIDIA H100 80GB card offer 85.52 GB?\" (thundergolfer.com); \
                    CUDA reports 1-2 % less";

/// The table.
pub const GPUS: &[Gpu] = &[
    Gpu {
        names: &["t4"],
        name: "NVIDIA Tesla T4",
        usable: 15_843_721_216,
        source: "CUDA total, deviceQuery on a Tesla T4: 15843721216 bytes (chiemon.github.io, \
                 NVIDIA card information)",
    },
    Gpu {
        names: &["a100-40gb", "a100"],
        name: "NVIDIA A100 40GB",
        usable: 42_405_855_232,
        source: "CUDA total, deviceQuery on an A100 40GB: 42405855232 bytes (Paderborn PC2 \
                 documentation, NVIDIA A100 40GB with NVLINK)",
    },
    Gpu {
        names: &["a100-80gb"],
        name: "NVIDIA A100 80GB",
        usable: 81_920 * MIB,
        source: NVML,
    },
    Gpu {
        names: &["h100", "h100-80gb"],
        name: "NVIDIA H100 80GB",
        usable: 81_559 * MIB,
        source: NVML,
    },
    Gpu {
        names: &["h200", "h200-141gb"],
        name: "NVIDIA H200 141GB",
        usable: 143_771 * MIB,
        source: NVML,
    },
    Gpu {
        names: &["l40s"],
        name: "NVIDIA L40S",
        usable: 46_068 * MIB,
        source: NVML,
    },
    Gpu {
        names: &["l4"],
        name: "NVIDIA L4",
        usable: 23_034 * MIB,
        source: NVML,
    },
    Gpu {
        names: &["a10", "a10g"],
        name: "NVIDIA A10",
        usable: 23_028 * MIB,
        source: NVML,
    },
];

/// The GPU called `name` (case and `_`/space insensitive).
pub fn find(name: &str) -> Result<&'static Gpu, AdvisorError> {
    let key: String = name
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c == '_' || c == ' ' { '-' } else { c })
        .collect();
    let key = key.strip_prefix("nvidia-").unwrap_or(&key);
    GPUS.iter().find(|g| g.names.contains(&key)).ok_or_else(|| {
        let known: Vec<&str> = GPUS.iter().map(|g| g.names[0]).collect();
        AdvisorError::Capacity(format!(
            "unknown GPU '{name}'; known: {} (or give --capacity SIZE)",
            known.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_whatever_their_case() {
        assert_eq!(find("H100").unwrap().usable, 81_559 << 20);
        assert_eq!(find("nvidia_a100_80gb").unwrap().name, "NVIDIA A100 80GB");
        assert_eq!(find("T4").unwrap().usable, 15_843_721_216);
        let e = find("h1000").unwrap_err().to_string();
        assert!(e.contains("'h1000'") && e.contains("h100"), "{e}");
    }

    #[test]
    fn every_name_is_unique() {
        let mut all: Vec<&str> = GPUS.iter().flat_map(|g| g.names.iter().copied()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
