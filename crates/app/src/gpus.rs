//! The one GPU table: each model's device memory as CUDA reports it, where that figure was
//! published (or, where none was found, the rule that estimated it), and what a capture needs
//! to pretend to be the card (compute capability, SM count, L2, shared memory per SM and its
//! opt-in). `--gpu NAME`, `--gpu list` (tune, compare, capture) and the Python package's
//! `cachalot.capture.gpus` all read it (Python through `_native`).
//!
//! The memory figure is CUDA's total (`cudaMemGetInfo`'s total, the same as
//! `torch.cuda.get_device_properties(d).total_memory` and the "total capacity" in torch's
//! out-of-memory message): what one process could allocate at most. It is below the size the
//! card is sold with (`nominal`) and below what `nvidia-smi` prints: the driver keeps some
//! (about 450-520 MiB on 16-80 GB cards, more with ECC on GDDR). Each row says which of three
//! kinds of evidence it has ([`Evidence`]):
//!
//! - `Exact`: a published `deviceQuery` (or `cudaGetDeviceProperties`) output, whose byte
//!   count the source quotes;
//! - `Torch`: a public torch out-of-memory message, which prints the total to two decimals of
//!   a GiB; the table keeps the lowest public figure found and the smallest byte count that
//!   prints as it (CUDA's total moves by a few MiB with the driver, ECC and a display);
//! - `Estimate`: no public figure found; the card's nominal size less what the driver keeps on
//!   the measured card named in `like` (same architecture and memory type), i.e.
//!   `nominal - (like.nominal - like.usable)`.
//!
//! A process's own CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers come out of this
//! memory too, outside PyTorch's allocator (`--headroom`). Compute capability, SM counts and
//! L2 sizes are NVIDIA's datasheets' and architecture whitepapers' (or the cited
//! `deviceQuery`'s); shared memory per SM and the opt-in per block follow the compute
//! capability (CUDA C++ Programming Guide, "Technical Specifications per Compute
//! Capability"). docs/gpus.md says how to add a card.

use anyhow::{Result, bail};
use cachalot_core::format_size;

/// What a row's memory figure rests on (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// A published deviceQuery's exact byte count (quoted in `source`).
    Exact,
    /// A public torch out-of-memory message's "total capacity of X GiB" (quoted in `source`).
    Torch,
    /// No public figure: `nominal` less the driver's share on the measured card `like` (a key).
    Estimate {
        /// The measured card of the same architecture and memory type.
        like: &'static str,
    },
}

/// One GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// The names it is looked up by (the first is its key); [`find`] ignores case, spaces,
    /// `-`/`_` and an `NVIDIA`/`GeForce`/`Tesla` prefix, and also takes `device_name`.
    pub names: &'static [&'static str],
    /// Its name for people.
    pub name: &'static str,
    /// The name CUDA reports for it (`torch.cuda.get_device_name()`), which a capture shows.
    pub device_name: &'static str,
    /// CUDA's total, bytes (see the module documentation).
    pub usable: u64,
    /// Where `usable` was published, or the estimate's rule.
    pub source: &'static str,
    /// What `usable` rests on.
    pub evidence: Evidence,
    /// The memory it is sold with, bytes (NVIDIA's "GB" here is 2^30 bytes).
    pub nominal: u64,
    /// Architecture and chip, e.g. "Hopper GH100".
    pub arch: &'static str,
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

    /// Whether `usable` is an estimate rather than a published figure.
    pub fn is_estimate(&self) -> bool {
        matches!(self.evidence, Evidence::Estimate { .. })
    }
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

// Shared memory per SM and per-block opt-in by compute capability (CUDA C++ Programming Guide).
const SM70: (u64, u64) = (96 * KIB, 96 * KIB);
const SM75: (u64, u64) = (64 * KIB, 64 * KIB);
const SM80: (u64, u64) = (164 * KIB, 163 * KIB);
const SM86: (u64, u64) = (100 * KIB, 99 * KIB); // also 8.9 and 12.0
const SM90: (u64, u64) = (228 * KIB, 227 * KIB); // also 10.0

/// One row, in the order the table reads best.
#[allow(clippy::too_many_arguments)]
const fn gpu(
    names: &'static [&'static str],
    name: &'static str,
    device_name: &'static str,
    usable: u64,
    evidence: Evidence,
    source: &'static str,
    nominal: u64,
    arch: &'static str,
    cc: (u32, u32),
    sms: u32,
    l2: u64,
    smem: (u64, u64),
) -> Gpu {
    Gpu {
        names,
        name,
        device_name,
        usable,
        source,
        evidence,
        nominal,
        arch,
        cc,
        sms,
        l2,
        smem_per_sm: smem.0,
        smem_optin: smem.1,
    }
}

use Evidence::{Exact, Torch};
const fn like(key: &'static str) -> Evidence {
    Evidence::Estimate { like: key }
}

/// The table, ordered by memory (then key): [`smallest_fitting`] walks it in order.
pub const GPUS: &[Gpu] = &[
    gpu(
        &["t4"],
        "NVIDIA Tesla T4",
        "Tesla T4",
        15_843_721_216,
        Exact,
        "deviceQuery on a Tesla T4: 15843721216 bytes (chiemon.github.io, NVIDIA card \
         information); torch on Colab's T4 prints 14.75 GiB (hpcaitech/Open-Sora#697)",
        16 * GIB,
        "Turing TU104",
        (7, 5),
        40,
        4 * MIB,
        SM75,
    ),
    gpu(
        &["rtx5080", "5080"],
        "NVIDIA GeForce RTX 5080",
        "NVIDIA GeForce RTX 5080",
        16_497_311_744,
        like("rtx5090"),
        "estimate: 16 GiB less the 651 MiB the driver keeps of an RTX 5090's 32 GiB (GDDR7)",
        16 * GIB,
        "Blackwell GB203",
        (12, 0),
        84,
        64 * MIB,
        SM86,
    ),
    gpu(
        &["rtx4080", "4080"],
        "NVIDIA GeForce RTX 4080",
        "NVIDIA GeForce RTX 4080",
        15_889 * MIB,
        like("rtx4090"),
        "estimate: 16 GiB less the 495 MiB the driver keeps of an RTX 4090's 24 GiB (GDDR6X); \
         torch on Windows prints 15.99 GiB (aigc-apps/sd-webui-EasyPhoto#281), Linux less",
        16 * GIB,
        "Ada Lovelace AD103",
        (8, 9),
        76,
        64 * MIB,
        SM86,
    ),
    gpu(
        &["v100-16gb", "v100", "v100-sxm2-16gb"],
        "NVIDIA V100 16GB",
        "Tesla V100-SXM2-16GB",
        16_155 * MIB,
        Torch,
        "torch: \"15.78 GiB total capacity\" on a 16 GB V100 (kchengiva/Shift-GCN#34)",
        16 * GIB,
        "Volta GV100",
        (7, 0),
        80,
        6 * MIB,
        SM70,
    ),
    gpu(
        &["l4"],
        "NVIDIA L4",
        "NVIDIA L4",
        22_555 * MIB,
        Torch,
        "torch: \"a total capacity of 22.03 GiB\" on an L4 (ArcInstitute/evo2#190); \
         nvidia-smi 23034 MiB (modal-labs/modal-client#2797)",
        24 * GIB,
        "Ada Lovelace AD104",
        (8, 9),
        58,
        48 * MIB,
        SM86,
    ),
    gpu(
        &["a10"],
        "NVIDIA A10",
        "NVIDIA A10",
        23_026 * MIB,
        like("a10g"),
        "estimate: the A10G's figure (the same 24 GB GDDR6 with ECC); nvidia-smi 23028 MiB \
         (modal-labs/modal-client#2797)",
        24 * GIB,
        "Ampere GA102",
        (8, 6),
        72,
        6 * MIB,
        SM86,
    ),
    gpu(
        &["a10g"],
        "NVIDIA A10G",
        "NVIDIA A10G",
        23_026 * MIB,
        Torch,
        "torch: \"22.49 GiB total capacity\" on an A10G (AUTOMATIC1111/stable-diffusion-webui#1259)",
        24 * GIB,
        "Ampere GA102",
        (8, 6),
        80,
        6 * MIB,
        SM86,
    ),
    gpu(
        &["rtx4090", "4090"],
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GeForce RTX 4090",
        24_081 * MIB,
        Torch,
        "torch: \"a total capacity of 23.52 GiB\" on an RTX 4090 (Soul-AILab/SoulX-FlashTalk#5); \
         others print 23.64-23.65 (3DTopia/Phidias-Diffusion#8), Windows 23.99",
        24 * GIB,
        "Ada Lovelace AD102",
        (8, 9),
        128,
        72 * MIB,
        SM86,
    ),
    gpu(
        &["rtx3090", "3090"],
        "NVIDIA GeForce RTX 3090",
        "NVIDIA GeForce RTX 3090",
        25_286_672_384,
        Exact,
        "deviceQuery on an RTX 3090: Global Memory 25286672384 bytes \
         (Jumperkables/cuda-benchmarking, 00_deviceQuery/README.md)",
        24 * GIB,
        "Ampere GA102",
        (8, 6),
        82,
        6 * MIB,
        SM86,
    ),
    gpu(
        &["rtx3090ti", "3090ti"],
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 3090 Ti",
        25_286_672_384,
        like("rtx3090"),
        "estimate: the RTX 3090's figure (the same 24 GB GDDR6X)",
        24 * GIB,
        "Ampere GA102",
        (8, 6),
        84,
        6 * MIB,
        SM86,
    ),
    gpu(
        &["rtx5090", "5090"],
        "NVIDIA GeForce RTX 5090",
        "NVIDIA GeForce RTX 5090",
        33_677_180_928,
        Exact,
        "deviceQuery on an RTX 5090: 33677180928 bytes, L2 100663296 bytes, 170 SMs \
         (aikitoria/open-gpu-kernel-modules#1)",
        32 * GIB,
        "Blackwell GB202",
        (12, 0),
        170,
        96 * MIB,
        SM86,
    ),
    gpu(
        &["v100-32gb", "v100-sxm2-32gb"],
        "NVIDIA V100 32GB",
        "Tesla V100-SXM2-32GB",
        32_498 * MIB,
        Torch,
        "torch: \"31.74 GiB total capacity\" on a 32 GB V100 (liucongg/ChatGLM-Finetuning#73, \
         haotian-liu/LLaVA#812)",
        32 * GIB,
        "Volta GV100",
        (7, 0),
        80,
        6 * MIB,
        SM70,
    ),
    gpu(
        &["a100-40gb", "a100", "a100-sxm4-40gb", "a100-40gb-sxm"],
        "NVIDIA A100 40GB SXM4",
        "NVIDIA A100-SXM4-40GB",
        42_405_855_232,
        Exact,
        "deviceQuery on an A100 40GB: 42405855232 bytes (Paderborn PC2 documentation, NVIDIA \
         A100 40GB with NVLINK); torch prints 39.50 GiB (TianheWu/CoSeR#10)",
        40 * GIB,
        "Ampere GA100",
        (8, 0),
        108,
        40 * MIB,
        SM80,
    ),
    gpu(
        &["a100-40gb-pcie", "a100-pcie-40gb", "a100-pcie"],
        "NVIDIA A100 40GB PCIe",
        "NVIDIA A100-PCIE-40GB",
        42_405_855_232,
        like("a100-40gb"),
        "estimate: the A100 40GB SXM4's figure (the same 40 GB HBM2)",
        40 * GIB,
        "Ampere GA100",
        (8, 0),
        108,
        40 * MIB,
        SM80,
    ),
    gpu(
        &["l40"],
        "NVIDIA L40",
        "NVIDIA L40",
        45_462 * MIB,
        Torch,
        "torch: \"a total capacity of 44.40 GiB\" on an L40 (QwenLM/Qwen3-VL#2097)",
        48 * GIB,
        "Ada Lovelace AD102",
        (8, 9),
        142,
        96 * MIB,
        SM86,
    ),
    gpu(
        &["l40s"],
        "NVIDIA L40S",
        "NVIDIA L40S",
        45_482 * MIB,
        Torch,
        "torch: \"a total capacity of 44.42 GiB\" on an L40S (stepfun-ai/Step-Video-T2V#8); \
         nvidia-smi 46068 MiB (modal-labs/modal-client#2797)",
        48 * GIB,
        "Ada Lovelace AD102",
        (8, 9),
        142,
        96 * MIB,
        SM86,
    ),
    gpu(
        &["rtx6000-ada", "6000-ada"],
        "NVIDIA RTX 6000 Ada Generation",
        "NVIDIA RTX 6000 Ada Generation",
        45_493 * MIB,
        Torch,
        "torch: \"a total capacity of 44.43 GiB\" on an RTX 6000 Ada with ECC on, nvidia-smi \
         46068 MiB (DINGYANB/MTVCrafter#21)",
        48 * GIB,
        "Ada Lovelace AD102",
        (8, 9),
        142,
        96 * MIB,
        SM86,
    ),
    gpu(
        &["a6000", "rtx-a6000"],
        "NVIDIA RTX A6000",
        "NVIDIA RTX A6000",
        51_056_476_160,
        like("rtx3090"),
        "estimate: 48 GiB less the 461 MiB the driver keeps of an RTX 3090's 24 GiB (GA102, \
         ECC off by default)",
        48 * GIB,
        "Ampere GA102",
        (8, 6),
        84,
        6 * MIB,
        SM86,
    ),
    gpu(
        &[
            "h100",
            "h100-sxm",
            "h100-sxm5",
            "h100-80gb",
            "h100-80gb-hbm3",
        ],
        "NVIDIA H100 80GB SXM5",
        "NVIDIA H100 80GB HBM3",
        81_005 * MIB,
        Torch,
        "torch: \"a total capacity of 79.11 GiB\" on an H100 (vllm-project/vllm#27508); \
         deviceQuery 85045477376 bytes, L2 52428800 bytes (thamada/nvidia-smi, \
         nvsim/H100SXMx8_deviceQuery.py); nvidia-smi 81559 MiB",
        80 * GIB,
        "Hopper GH100",
        (9, 0),
        132,
        50 * MIB,
        SM90,
    ),
    gpu(
        &["h100-pcie"],
        "NVIDIA H100 PCIe",
        "NVIDIA H100 PCIe",
        81_005 * MIB,
        like("h100"),
        "estimate: the H100 SXM5's figure (80 GB; HBM2e here)",
        80 * GIB,
        "Hopper GH100",
        (9, 0),
        114,
        50 * MIB,
        SM90,
    ),
    gpu(
        &["a100-80gb", "a100-sxm4-80gb", "a100-80gb-sxm"],
        "NVIDIA A100 80GB SXM4",
        "NVIDIA A100-SXM4-80GB",
        81_036 * MIB,
        Torch,
        "torch: \"a total capacity of 79.14 GiB\" on an 80 GB A100 (lianqi1008/Control-GIC#6); \
         others print 79.25 (levihsu/OOTDiffusion#235)",
        80 * GIB,
        "Ampere GA100",
        (8, 0),
        108,
        40 * MIB,
        SM80,
    ),
    gpu(
        &["a100-80gb-pcie", "a100-pcie-80gb"],
        "NVIDIA A100 80GB PCIe",
        "NVIDIA A100 80GB PCIe",
        81_036 * MIB,
        like("a100-80gb"),
        "estimate: the A100 80GB SXM4's figure (the same 80 GB HBM2e)",
        80 * GIB,
        "Ampere GA100",
        (8, 0),
        108,
        40 * MIB,
        SM80,
    ),
    gpu(
        &["h100-nvl"],
        "NVIDIA H100 NVL",
        "NVIDIA H100 NVL",
        95_228 * MIB,
        Torch,
        "torch: \"a total capacity of 93.00 GiB\" on an H100 NVL 94GB (ali-vilab/VACE#56)",
        94 * GIB,
        "Hopper GH100",
        (9, 0),
        132,
        50 * MIB,
        SM90,
    ),
    gpu(
        &["gh200", "gh200-96gb"],
        "NVIDIA GH200 96GB",
        "NVIDIA GH200 480GB",
        97_389 * MIB,
        like("h100"),
        "estimate: 96 GiB less the 915 MiB the driver keeps of an H100 SXM5's 80 GiB (the same \
         GH100 with HBM3)",
        96 * GIB,
        "Hopper GH100",
        (9, 0),
        132,
        50 * MIB,
        SM90,
    ),
    gpu(
        &["h200", "h200-141gb"],
        "NVIDIA H200 141GB",
        "NVIDIA H200",
        143_070 * MIB,
        Torch,
        "torch: \"a total capacity of 139.72 GiB\" (139.72-139.81 in the public OOM messages \
         collected in design/outside-torch-and-versions.md section 1.2); nvidia-smi 143771 MiB",
        141 * GIB,
        "Hopper GH100",
        (9, 0),
        132,
        50 * MIB,
        SM90,
    ),
    gpu(
        &["b200"],
        "NVIDIA B200",
        "NVIDIA B200",
        182_627 * MIB,
        Torch,
        "cudaGetDeviceProperties on a B200: \"Total Global Memory: 178.35 GB\" in GiB, L2 126.50 \
         MiB, 148 SMs, 228 KiB shared memory per SM (pytorch/ao#4002); torch prints 178.36 GiB",
        180 * GIB,
        "Blackwell GB100",
        (10, 0),
        148,
        126 * MIB + 512 * KIB,
        SM90,
    ),
];

/// Short names that stand for one of several cards: what they are taken as.
pub const ALIAS_NOTES: &[(&str, &str)] = &[
    (
        "a100",
        "'a100' is taken as the A100 40GB SXM4, the smaller; say a100-80gb (or \
              a100-40gb-pcie, a100-80gb-pcie) for the others",
    ),
    (
        "v100",
        "'v100' is taken as the V100 16GB, the smaller; say v100-32gb for the other",
    ),
    (
        "h100",
        "'h100' is taken as the H100 80GB SXM5; say h100-pcie or h100-nvl for the others",
    ),
];

/// A name as [`find`] compares it: lower case, letters and digits only, without a leading
/// `nvidia`, `geforce` or `tesla`.
fn normalize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    for prefix in ["nvidia", "geforce", "tesla"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest.to_string();
        }
    }
    s
}

/// The GPU called `name` (see [`Gpu::names`]); an unknown name is an error that quotes it,
/// names the closest known names and lists the keys.
pub fn find(name: &str) -> Result<&'static Gpu> {
    let key = normalize(name);
    let hit = GPUS.iter().find(|g| {
        !key.is_empty()
            && (normalize(g.device_name) == key || g.names.iter().any(|n| normalize(n) == key))
    });
    match hit {
        Some(g) => Ok(g),
        None => {
            let mut near: Vec<(usize, &str)> = GPUS
                .iter()
                .flat_map(|g| g.names.iter().map(move |n| (n, g.key())))
                .map(|(n, k)| (strsim::levenshtein(&normalize(n), &key), k))
                .filter(|&(d, _)| d <= 2 || (d <= 3 && key.len() >= 4))
                .collect();
            near.sort_unstable();
            let mut close: Vec<&str> = Vec::new();
            for (_, k) in near {
                if !close.contains(&k) && close.len() < 3 {
                    close.push(k);
                }
            }
            let hint = if close.is_empty() {
                String::new()
            } else {
                format!(": did you mean {}?", close.join(", "))
            };
            let known: Vec<&str> = GPUS.iter().map(Gpu::key).collect();
            bail!(
                "unknown GPU '{name}'{hint} known: {} (--gpu list shows the table; or give \
                 --capacity SIZE)",
                known.join(", ")
            )
        }
    }
}

/// What a short name that stands for several cards was taken as, if `name` is one.
pub fn alias_note(name: &str) -> Option<&'static str> {
    let key = normalize(name);
    ALIAS_NOTES
        .iter()
        .find(|(a, _)| normalize(a) == key)
        .map(|(_, n)| *n)
}

/// The GPU with the least memory that still has `need` bytes, if any.
pub fn smallest_fitting(need: u64) -> Option<&'static Gpu> {
    GPUS.iter().find(|g| g.usable >= need)
}

/// The table for people (`--gpu list`).
pub fn table_text() -> String {
    let mut out = format!(
        "{:<14} {:>11} {:>10}  {:>4}  {:>3}  {:>9}  names\n",
        "GPU", "CUDA total", "sold as", "cc", "SMs", "L2"
    );
    for g in GPUS {
        out.push_str(&format!(
            "{:<14} {:>10}{} {:>10}  {:>4}  {:>3}  {:>9}  {}\n",
            g.key(),
            format_size(g.usable),
            if g.is_estimate() { "*" } else { " " },
            format_size(g.nominal),
            format!("{}.{}", g.cc.0, g.cc.1),
            g.sms,
            format_size(g.l2),
            g.names.join(", ")
        ));
    }
    out.push_str(
        "\nCUDA total: what torch.cuda.get_device_properties().total_memory reports, the most \
         one process can allocate;\nits CUDA context and libraries take some of it outside \
         PyTorch's allocator (--headroom). * = estimate.\n",
    );
    for (_, note) in ALIAS_NOTES {
        out.push_str(&format!("{note}.\n"));
    }
    out.push_str("\nsources:\n");
    for g in GPUS {
        out.push_str(&format!("  {}: {}\n", g.key(), g.source));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_however_they_are_typed() {
        for typed in [
            "4090",
            "rtx-4090",
            "RTX 4090",
            "rtx4090",
            "NVIDIA GeForce RTX 4090",
        ] {
            assert_eq!(find(typed).unwrap().key(), "rtx4090", "{typed}");
        }
        assert_eq!(find("nvidia_a100_80gb").unwrap().key(), "a100-80gb");
        assert_eq!(find("NVIDIA A100-SXM4-80GB").unwrap().key(), "a100-80gb");
        assert_eq!(find("T4").unwrap().usable, 15_843_721_216);
        assert_eq!(find("a10g").unwrap().key(), "a10g");
        assert_eq!(find("H100").unwrap().key(), "h100");
        assert_eq!(find("NVIDIA H100 80GB HBM3").unwrap().key(), "h100");
        assert_eq!(find("a100").unwrap().key(), "a100-40gb");
        assert!(alias_note("A100").unwrap().contains("40GB"));
        assert!(alias_note("a100-80gb").is_none());
        assert!(find("").is_err() && find("nvidia").is_err());
    }

    #[test]
    fn unknown_names_are_quoted_with_close_matches() {
        let e = find("h1000").unwrap_err().to_string();
        assert!(
            e.contains("'h1000'") && e.contains("did you mean h100"),
            "{e}"
        );
        let e = find("rtx 4900").unwrap_err().to_string();
        assert!(e.contains("'rtx 4900'") && e.contains("rtx4090"), "{e}");
        let e = find("k80").unwrap_err().to_string();
        assert!(e.contains("known: t4") && e.contains("--capacity"), "{e}");
    }

    #[test]
    fn smallest_fitting_walks_up_the_table() {
        assert_eq!(smallest_fitting(14 << 30).unwrap().key(), "t4");
        assert_eq!(smallest_fitting(15 << 30).unwrap().key(), "rtx5080");
        assert_eq!(smallest_fitting(70 << 30).unwrap().key(), "h100");
        assert!(smallest_fitting(1 << 50).is_none());
        let t = table_text();
        assert!(t.contains("a100-40gb") && t.contains("rtx6000-ada") && t.contains("sources:"));
    }
}
