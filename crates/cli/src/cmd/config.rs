//! `cachalot config "<string>"`: what a configuration means, option by option.

use std::process::ExitCode;

use anyhow::Result;

/// Arguments of `cachalot config`.
#[derive(clap::Args)]
pub struct Args {
    /// A PYTORCH_CUDA_ALLOC_CONF string, e.g. "max_split_size_mb:128,expandable_segments:True".
    /// Without it, the environment is read as PyTorch reads it.
    conf: Option<String>,
    /// cachalot's own options on top (CACHALOT_ALLOC_CONF grammar, in place of that
    /// variable), e.g. "expandable_oversize_exempt:True".
    #[arg(long)]
    cachalot: Option<String>,
}

/// Runs `cachalot config`.
pub fn run(a: Args) -> Result<ExitCode> {
    let resolved = match crate::args::resolve_conf(a.conf.as_deref(), a.cachalot.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cachalot: {e}");
            eprintln!("  torch 2.15 says: {}", e.torch_message());
            return Ok(ExitCode::from(2));
        }
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
