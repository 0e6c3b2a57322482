//! Memory a process holds on its GPU outside PyTorch's caching allocator, per rank: the CUDA
//! context (from the GPU's SM count, lazy or eager module loading), cuBLAS/cuDNN library
//! memory, NCCL's communicators, and the contexts of other processes on the same device. Each
//! part is an estimate with a low-high range and the source of its rule; `capture` adds the
//! total to the peak reserved and compares it with CUDA's total (`docs/budget.md`).
//!
//! The figures are public measurements (`shared/design/outside-torch-and-versions.md` §1):
//!
//! - bare CUDA context: 107 MiB on a 34-SM card, 555 MiB on a 188-SM card (llama.cpp PR
//!   #23604); the local-memory reserve grows with the SM count, so the rule is the line
//!   through those two points, 8 MiB + 2.91 MiB per SM, with -20 %/+25 %;
//! - eager module loading (`CUDA_MODULE_LOADING=EAGER`) adds torch's kernels: 666,632,192 B
//!   against 287 MB lazy in the same test (pytorch PR #85692), up to 1,687 MB against 721 MB
//!   (pytorch#55277): +380 MiB, 300 MiB-1 GiB; CUDA has loaded lazily by default on Linux
//!   since 12.2 and torch 2.15 sets nothing;
//! - cuBLAS/cuDNN module code and handles outside the allocator: 200 MiB, 100-500 MiB,
//!   inferred from the 0.24-0.84 GiB cluster of non-torch memory in 14 public OOM messages
//!   (median 0.63 GiB) less the context;
//! - NCCL, per communicator: 544 MB for 2 ranks, 688 MB for more, 512 MiB for one (a NET
//!   buffer), measured with the default `NCCL_BUFFSIZE` of 4 MiB (nccl#964, #864, #2363); of
//!   that, the ring buffers are 2 connections x channels x (SIMPLE + LL128, each about
//!   `NCCL_BUFFSIZE`), 16 channels assumed where none is given; range half to three times
//!   (nccl#1685: 1.06 GB growing to 4.34 GB after an all_to_all);
//! - another process's context on the device (a rank without `set_device`): about 500 MB
//!   each (pi-GAN#22, PS-MT#20), modelled as one more context of this GPU.

use serde::Deserialize;

use crate::gpus::Gpu;

const MIB: u64 = 1 << 20;
const MB: u64 = 1_000_000;

/// How CUDA loads the kernels of the libraries a process links (`CUDA_MODULE_LOADING`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleLoading {
    /// On first use of each kernel: CUDA's default on Linux since 12.2.
    Lazy,
    /// Every module at context creation.
    Eager,
}

impl ModuleLoading {
    /// As CUDA reads `CUDA_MODULE_LOADING` (`value` `None` where unset): `EAGER` is eager,
    /// anything else lazy (torch 2.15 sets nothing).
    pub fn from_env(value: Option<&str>) -> Self {
        match value {
            Some(v) if v.trim().eq_ignore_ascii_case("eager") => ModuleLoading::Eager,
            _ => ModuleLoading::Lazy,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ModuleLoading::Lazy => "lazy",
            ModuleLoading::Eager => "eager",
        }
    }
}

/// One NCCL communicator a rank belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Communicator {
    /// How many ranks it joins.
    pub ranks: u32,
    /// `NCCL_BUFFSIZE` in bytes (`None`: the environment's, else NCCL's 4 MiB).
    #[serde(default)]
    pub buffsize: Option<u64>,
    /// Channels (`None`: the measured figure's, 16 assumed).
    #[serde(default)]
    pub channels: Option<u32>,
}

/// What a rank does on its device besides torch's allocations (filled by the capture of
/// each rank; every field has a default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankOutside {
    /// The GPU this rank runs on (`None`: the request's).
    #[serde(default)]
    pub gpu: Option<String>,
    /// Other processes holding a context on the same device (0: only this one).
    #[serde(default)]
    pub extra_contexts: u32,
    /// Module loading (`None`: `CUDA_MODULE_LOADING` from the environment).
    #[serde(default)]
    pub module_loading: Option<ModuleLoading>,
    /// The NCCL communicators the rank belongs to.
    #[serde(default)]
    pub nccl: Vec<Communicator>,
}

/// One part of the memory outside torch's allocator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// What it is, for the report.
    pub name: String,
    /// The estimate, bytes.
    pub bytes: u64,
    /// The range the estimate is believed to lie in.
    pub low: u64,
    /// See [`Part::low`].
    pub high: u64,
    /// Where the rule comes from.
    pub source: String,
}

impl Part {
    fn exact(name: &str, bytes: u64, source: &str) -> Part {
        Part {
            name: name.into(),
            bytes,
            low: bytes,
            high: bytes,
            source: source.into(),
        }
    }
}

/// The memory one rank holds outside torch's allocator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outside {
    /// The parts (none: nothing outside, e.g. `--reserve 0`).
    pub parts: Vec<Part>,
}

/// The environment variables the model reads, where a request does not say.
pub const ENV_VARS: [&str; 2] = ["CUDA_MODULE_LOADING", "NCCL_BUFFSIZE"];

/// NCCL's default `NCCL_BUFFSIZE` (init.cc `DEFAULT_BUFFSIZE`).
pub const NCCL_DEFAULT_BUFFSIZE: u64 = 4 * MIB;
const NCCL_DEFAULT_CHANNELS: u64 = 16;

impl Outside {
    /// The estimate: the parts' sum.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.bytes).sum()
    }

    /// The low end of the range.
    pub fn low(&self) -> u64 {
        self.parts.iter().map(|p| p.low).sum()
    }

    /// The high end of the range.
    pub fn high(&self) -> u64 {
        self.parts.iter().map(|p| p.high).sum()
    }

    /// An explicit total (`--reserve`): one exact part.
    pub fn explicit(bytes: u64) -> Outside {
        Outside {
            parts: vec![Part::exact(
                "reserved (--reserve)",
                bytes,
                "given: replaces the model",
            )],
        }
    }

    /// The model for one rank on `gpu`; `env` answers [`ENV_VARS`] where `rank` does not say.
    pub fn model(gpu: &Gpu, rank: &RankOutside, env: &dyn Fn(&str) -> Option<String>) -> Outside {
        let loading = rank
            .module_loading
            .unwrap_or_else(|| ModuleLoading::from_env(env("CUDA_MODULE_LOADING").as_deref()));
        let mut parts = vec![context(gpu, loading, "CUDA context")];
        parts.push(Part {
            name: "cuBLAS/cuDNN".into(),
            bytes: 200 * MIB,
            low: 100 * MIB,
            high: 500 * MIB,
            source: "library code and handles outside the allocator, inferred from public OOM \
                     messages (0.24-0.84 GiB of non-torch memory, less the context)"
                .into(),
        });
        let env_buffsize = env("NCCL_BUFFSIZE").and_then(|v| parse_int(&v));
        for c in &rank.nccl {
            parts.push(nccl(c, c.buffsize.or(env_buffsize)));
        }
        for _ in 0..rank.extra_contexts {
            parts.push(context(
                gpu,
                loading,
                "another process's context on this device",
            ));
        }
        Outside { parts }
    }

    /// With `headroom` (`--headroom`) added as one exact part.
    pub fn with_headroom(mut self, headroom: Option<u64>) -> Outside {
        if let Some(h) = headroom.filter(|&h| h > 0) {
            self.parts.push(Part::exact(
                "headroom (--headroom)",
                h,
                "given: kept free on top of the estimate",
            ));
        }
        self
    }

    /// `outside_torch_bytes` in `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "estimate": self.bytes(),
            "low": self.low(),
            "high": self.high(),
            "parts": self.parts.iter().map(|p| serde_json::json!({
                "name": p.name,
                "bytes": p.bytes,
                "low": p.low,
                "high": p.high,
                "source": p.source,
            })).collect::<Vec<_>>(),
        })
    }
}

/// A decimal or `0x` byte count as NCCL reads its variables; `None` for anything else.
fn parse_int(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

fn context(gpu: &Gpu, loading: ModuleLoading, name: &str) -> Part {
    // The line through 107 MiB at 34 SMs and 555 MiB at 188 SMs, in KiB for exactness.
    let bare = (8 * 1024 + 2979 * u64::from(gpu.sms)) * 1024;
    let (mut bytes, mut low, mut high) = (bare, bare / 5 * 4, bare / 4 * 5);
    let mut source = format!(
        "{} lazy module loading: 8 MiB + 2.91 MiB per SM x {} SMs, the line through 107 MiB \
         at 34 SMs and 555 MiB at 188 (llama.cpp PR #23604)",
        gpu.name, gpu.sms
    );
    if loading == ModuleLoading::Eager {
        bytes += 380 * MIB;
        low += 300 * MIB;
        high += 1024 * MIB;
        source = format!(
            "{source}; CUDA_MODULE_LOADING=EAGER adds torch's kernels, +380 MiB (666,632,192 B \
             eager against 287 MB lazy, pytorch PR #85692)"
        );
    }
    Part {
        name: format!("{name} ({})", loading.name()),
        bytes,
        low,
        high,
        source,
    }
}

fn nccl(c: &Communicator, buffsize: Option<u64>) -> Part {
    let measured = match c.ranks {
        0 | 1 => 512 * MIB,
        2 => 544 * MB,
        _ => 688 * MB,
    };
    let buffers_at = |buffsize: u64, channels: u64| {
        // 2 connections x channels x (SIMPLE + LL128, each about NCCL_BUFFSIZE)
        4u64.saturating_mul(channels).saturating_mul(buffsize)
    };
    let default_buffers = buffers_at(NCCL_DEFAULT_BUFFSIZE, NCCL_DEFAULT_CHANNELS);
    let fixed = measured - default_buffers;
    let buffers = buffers_at(
        buffsize.unwrap_or(NCCL_DEFAULT_BUFFSIZE),
        c.channels.map_or(NCCL_DEFAULT_CHANNELS, u64::from),
    );
    let bytes = fixed.saturating_add(buffers);
    let mut said = Vec::new();
    if let Some(b) = buffsize {
        said.push(format!("NCCL_BUFFSIZE={b}"));
    }
    if let Some(ch) = c.channels {
        said.push(format!("{ch} channels"));
    }
    Part {
        name: format!("NCCL communicator of {} ranks", c.ranks),
        bytes,
        low: bytes / 2,
        high: bytes.saturating_mul(3),
        source: format!(
            "measured {} MB per communicator at NCCL's defaults (nccl#964, #864, #2363), its \
             ring buffers 2 connections x channels x 2 x NCCL_BUFFSIZE{}; up to 3x after \
             all_to_all (nccl#1685)",
            measured / MB,
            if said.is_empty() {
                String::new()
            } else {
                format!(" ({})", said.join(", "))
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::find;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_context_follows_the_sm_count_through_both_measurements() {
        let mut g = *find("h100").unwrap();
        for (sms, mib) in [(34, 107), (188, 555)] {
            g.sms = sms;
            let p = context(&g, ModuleLoading::Lazy, "c");
            let got = p.bytes as f64 / MIB as f64;
            assert!((got - mib as f64).abs() < 1.0, "{sms} SMs: {got} MiB");
            assert!(p.low < p.bytes && p.bytes < p.high);
        }
    }

    #[test]
    fn eager_loading_comes_from_the_environment_or_the_rank() {
        let g = find("h100").unwrap();
        let lazy = Outside::model(g, &RankOutside::default(), &no_env);
        let eager_env = Outside::model(g, &RankOutside::default(), &|k| {
            (k == "CUDA_MODULE_LOADING").then(|| "EAGER".to_string())
        });
        assert_eq!(eager_env.bytes() - lazy.bytes(), 380 * MIB);
        assert!(eager_env.parts[0].name.contains("eager"));
        let rank = RankOutside {
            module_loading: Some(ModuleLoading::Lazy),
            ..RankOutside::default()
        };
        let forced = Outside::model(g, &rank, &|_| Some("EAGER".into()));
        assert_eq!(forced, lazy);
        // The default on an H100 is inside the public cluster of non-torch memory.
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        assert!(
            (0.4..0.8).contains(&gib(lazy.bytes())),
            "{}",
            gib(lazy.bytes())
        );
        assert!(lazy.low() < lazy.bytes() && lazy.bytes() < lazy.high());
    }

    #[test]
    fn nccl_reproduces_its_measurements_and_scales_with_the_buffers() {
        let two = Communicator {
            ranks: 2,
            buffsize: None,
            channels: None,
        };
        assert_eq!(nccl(&two, None).bytes, 544 * MB);
        let four = Communicator { ranks: 4, ..two };
        assert_eq!(nccl(&four, None).bytes, 688 * MB);
        // Twice the buffer: the buffer share (256 MiB at the defaults) doubles.
        assert_eq!(nccl(&four, Some(8 * MIB)).bytes, 688 * MB + 256 * MIB);
        let g = find("h100").unwrap();
        let rank = RankOutside {
            nccl: vec![four.clone(), four],
            extra_contexts: 1,
            ..RankOutside::default()
        };
        let o = Outside::model(g, &rank, &|k| {
            (k == "NCCL_BUFFSIZE").then(|| "0x800000".into())
        });
        assert_eq!(o.parts.len(), 5);
        assert_eq!(o.parts[2].bytes, 688 * MB + 256 * MIB);
        assert_eq!(o.parts[4].bytes, o.parts[0].bytes);
    }

    #[test]
    fn the_rank_inputs_are_read_from_json_and_bad_ones_are_named() {
        let r: RankOutside = serde_json::from_str(
            r#"{"gpu": "rtx4090", "extra_contexts": 2, "module_loading": "eager",
                "nccl": [{"ranks": 8, "channels": 32}]}"#,
        )
        .unwrap();
        assert_eq!(r.module_loading, Some(ModuleLoading::Eager));
        assert_eq!(r.nccl[0].channels, Some(32));
        let e = serde_json::from_str::<RankOutside>(r#"{"contexts": 2}"#).unwrap_err();
        assert!(e.to_string().contains("contexts"), "{e}");
    }

    #[test]
    fn an_explicit_reserve_and_headroom_are_exact() {
        let o = Outside::explicit(512 * MIB).with_headroom(Some(MIB));
        assert_eq!(
            (o.low(), o.bytes(), o.high()),
            (513 * MIB, 513 * MIB, 513 * MIB)
        );
        assert_eq!(o.json()["parts"].as_array().unwrap().len(), 2);
    }
}
