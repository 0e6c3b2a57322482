//! `cachalot config "<string>"`: what a configuration means, option by option.

use std::process::ExitCode;

use anyhow::Result;
use cachalot_core::config::{apply_cachalot, parse_pytorch};

/// Arguments of `cachalot config`.
#[derive(clap::Args)]
pub struct Args {
    /// A PYTORCH_CUDA_ALLOC_CONF string, e.g. "max_split_size_mb:128,expandable_segments:True".
    /// Without it, the environment is read as PyTorch reads it.
    conf: Option<String>,
    /// cachalot's own options on top (CACHALOT_ALLOC_CONF grammar), e.g.
    /// "expandable_oversize_exempt:True".
    #[arg(long)]
    cachalot: Option<String>,
}

/// Runs `cachalot config`.
pub fn run(a: Args) -> Result<ExitCode> {
    let resolved = match &a.conf {
        Some(s) => {
            let (mut conf, mut warnings) = match parse_pytorch(s) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("cachalot: {e}");
                    eprintln!("  torch 2.15 says: {}", e.torch_message());
                    return Ok(ExitCode::from(2));
                }
            };
            if let Some(c) = &a.cachalot {
                warnings.extend(apply_cachalot(&mut conf, c)?);
            }
            crate::args::ResolvedConf {
                conf,
                pytorch_cuda_alloc_conf: Some(s.clone()),
                pytorch_alloc_conf: None,
                cachalot_alloc_conf: a.cachalot.clone(),
                warnings,
            }
        }
        None => crate::args::resolve_conf(None)?,
    };
    crate::args::print_warnings(&resolved.warnings);
    let rows = resolved.conf.describe();
    let w_key = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w_val = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(5);
    let w_def = rows.iter().map(|r| r.2.len()).max().unwrap_or(0).max(7);
    println!(
        "{:w_key$}  {:w_val$}  {:w_def$}  meaning",
        "option", "value", "default"
    );
    // Compare with what the default configuration describes, not with the default's prose
    // ("0 (off)", "large_segment_size_mb (20)").
    let defaults = cachalot_core::AllocConf::default().describe();
    for ((key, value, default, meaning), (_, default_value, _, _)) in rows.into_iter().zip(defaults)
    {
        let mark = if value != default_value { "*" } else { " " };
        println!("{key:w_key$}  {value:w_val$}  {default:w_def$} {mark}{meaning}");
    }
    println!("(* = differs from the default)");
    Ok(ExitCode::SUCCESS)
}
