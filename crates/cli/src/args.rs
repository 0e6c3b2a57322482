//! Arguments shared by subcommands: device sizes, configurations, trace inputs.

use std::path::Path;

use anyhow::{Context, Result, bail};
use cachalot_core::config::{ConfigError, Overrides, Settings, Warning};
use cachalot_replay::LoadedTrace;

/// The trace bundled into the binary, replayed when no trace is given: GPT-2 124M training
/// (AdamW, batch 8 × 1024 tokens, 6 steps), 11,940 events.
pub const BUNDLED_TRACE: &[u8] = include_bytes!("../assets/gpt2-train.csv.gz");
/// Its name in reports.
pub const BUNDLED_NAME: &str = "<bundled gpt2-train.csv.gz>";

/// The one byte-size reader (`512M`, `24G`, `80GiB`, plain bytes), as clap's value parser.
pub use cachalot_core::parse_byte_size as parse_size;

/// A device capacity or headroom: [`parse_size`], but a plain number below 1 MiB needs a
/// unit (`--capacity 24` is far more likely meant as 24G than as 24 bytes).
pub fn parse_capacity(s: &str) -> Result<u64, String> {
    let bytes = parse_size(s).map_err(|e| e.to_string())?;
    let t = s.trim();
    if bytes < 1 << 20 && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "'{s}' has no unit and would mean {bytes} bytes; give a unit, e.g. {t}G or {t}M \
             (plain numbers are bytes and must be at least 1048576)"
        ));
    }
    Ok(bytes)
}

/// The settings from the environment, read as torch 2.15 reads it, with `--conf STR` (PyTorch's
/// grammar) in place of the PyTorch variables and `--cachalot STR` in place of
/// `CACHALOT_ALLOC_CONF` where given.
pub fn resolve_conf(conf: Option<&str>, cachalot: Option<&str>) -> Result<Settings, ConfigError> {
    let over = Overrides {
        pytorch: conf,
        cachalot,
    };
    Settings::resolve(|k| std::env::var(k).ok(), over)
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
mod capacity_tests {
    use super::parse_capacity;

    #[test]
    fn small_plain_numbers_need_a_unit() {
        let e = parse_capacity("24").unwrap_err();
        assert!(e.contains("'24'") && e.contains("24G"), "{e}");
        assert_eq!(parse_capacity("24G"), Ok(24 << 30));
        assert_eq!(parse_capacity("512K"), Ok(512 << 10));
        assert_eq!(parse_capacity("5215617024"), Ok(5_215_617_024));
        assert!(parse_capacity("12Q").unwrap_err().contains("'12Q'"));
    }
}
