//! `cachalot convert IN OUT.csv`: any supported input as an RMM memory-log CSV. The work is
//! `cachalot_app::convert`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cachalot_app::convert::convert;

/// Arguments of `cachalot convert`.
#[derive(clap::Args)]
pub struct Args {
    /// The input: a torch memory snapshot (pickle or JSON) or an RMM CSV, plain or gzip.
    input: PathBuf,
    /// The RMM CSV to write (`-` for standard output); gzip-compressed when the name ends in
    /// `.gz`.
    output: PathBuf,
    /// For a snapshot with history on several devices: the device to convert.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
}

/// Runs `cachalot convert`.
pub fn run(a: Args) -> Result<ExitCode> {
    let c = convert(&a.input, a.device)?;
    if let Some(note) = &c.note {
        eprintln!("cachalot: {note}");
    }
    if a.output.as_os_str() == "-" {
        std::io::stdout().lock().write_all(&c.csv)?;
    } else {
        c.write(&a.output)?;
    }
    Ok(ExitCode::SUCCESS)
}
