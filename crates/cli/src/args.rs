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
