//! Arguments shared by subcommands: device sizes, configurations, trace inputs.

use std::path::Path;

use anyhow::{Context, Result, bail};
use cachalot_core::AllocConf;
use cachalot_core::config::{Warning, apply_cachalot, from_env, parse_pytorch};
use cachalot_replay::LoadedTrace;

/// The trace bundled into the binary, replayed when no trace is given: GPT-2 124M training
/// (AdamW, batch 8 × 1024 tokens, 6 steps), 11,940 events.
pub const BUNDLED_TRACE: &[u8] = include_bytes!("../assets/gpt2-train.csv.gz");
/// Its name in reports.
pub const BUNDLED_NAME: &str = "<bundled gpt2-train.csv.gz>";

/// Parses a byte size: plain bytes (`1073741824`) or a number with a binary unit suffix
/// (`512M`, `24G`, `1.5T`, `80GiB`, `100MB`), as the oracle's `FAKE_CUDA_CAPACITY` does.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let valid = "expected bytes or a number with K, M, G or T (e.g. 24G, 512M, 80GiB)";
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size '{s}': {valid}"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!(
                "invalid size '{s}': unknown unit '{unit}'; {valid}"
            ));
        }
    };
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!(
            "invalid size '{s}': must be at least 1 byte and below 16 EiB"
        ));
    }
    Ok(bytes as u64)
}

/// A configuration and where it came from, for reports.
pub struct ResolvedConf {
    /// The configuration.
    pub conf: AllocConf,
    /// Raw `PYTORCH_CUDA_ALLOC_CONF` (or the `--conf` string).
    pub pytorch_cuda_alloc_conf: Option<String>,
    /// Raw `PYTORCH_ALLOC_CONF`.
    pub pytorch_alloc_conf: Option<String>,
    /// Raw `CACHALOT_ALLOC_CONF`.
    pub cachalot_alloc_conf: Option<String>,
    /// Warnings to show.
    pub warnings: Vec<Warning>,
}

/// Whether `PYTORCH_NO_CUDA_MEMORY_CACHING` switches caching off (torch 2.15: only `1` or
/// `true`).
pub fn no_caching_from_env() -> bool {
    std::env::var("PYTORCH_NO_CUDA_MEMORY_CACHING")
        .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "True" | "TRUE"))
}

/// `--conf STR` if given (PyTorch's grammar; `CACHALOT_ALLOC_CONF` from the environment still
/// applies on top), else the environment as PyTorch reads it.
pub fn resolve_conf(conf: Option<&str>) -> Result<ResolvedConf> {
    let env = |k: &str| std::env::var(k).ok();
    match conf {
        Some(s) => {
            let (mut conf, mut warnings) = parse_pytorch(s)?;
            let cachalot = env("CACHALOT_ALLOC_CONF");
            if let Some(c) = &cachalot {
                warnings.extend(apply_cachalot(&mut conf, c)?);
            }
            Ok(ResolvedConf {
                conf,
                pytorch_cuda_alloc_conf: Some(s.to_string()),
                pytorch_alloc_conf: None,
                cachalot_alloc_conf: cachalot,
                warnings,
            })
        }
        None => {
            let (conf, warnings, _source) = from_env(env)?;
            Ok(ResolvedConf {
                conf,
                pytorch_cuda_alloc_conf: env("PYTORCH_CUDA_ALLOC_CONF"),
                pytorch_alloc_conf: env("PYTORCH_ALLOC_CONF"),
                cachalot_alloc_conf: env("CACHALOT_ALLOC_CONF"),
                warnings,
            })
        }
    }
}

/// Prints configuration warnings to stderr.
pub fn print_warnings(warnings: &[Warning]) {
    for w in warnings {
        eprintln!("cachalot: warning: {w}");
    }
}

/// Loads a trace file, or the bundled trace when `path` is `None`. Returns the trace and the
/// name to report.
pub fn load_trace(path: Option<&Path>) -> Result<(LoadedTrace, String)> {
    match path {
        Some(p) => {
            if !p.exists() {
                bail!("trace file {} does not exist", p.display());
            }
            let t = cachalot_replay::load_path(p)
                .with_context(|| format!("cannot read trace {}", p.display()))?;
            Ok((t, p.display().to_string()))
        }
        None => {
            let t = cachalot_replay::load_bytes(BUNDLED_TRACE).context("bundled trace")?;
            Ok((t, BUNDLED_NAME.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_units_and_bytes() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("24G"), Ok(24 << 30));
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("100MB"), Ok(100 << 20));
    }

    #[test]
    fn bad_sizes_quote_the_input() {
        for bad in ["0", "12Q", "", "G", "-1G", "1e400"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
    }
}
