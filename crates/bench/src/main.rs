//! `cachalot-bench`: the development-only oracle benchmark (see `bench.rs`), a binary of its
//! own so that the user's `cachalot` and the wheel do not ship it.

mod bench;

use std::process::ExitCode;

use clap::Parser;

/// CPU time per replayed operation on several traces and configurations, next to torch
/// 2.15's own allocator where the oracle is set up.
#[derive(Parser)]
#[command(name = "cachalot-bench", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    args: bench::Args,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match bench::run(cli.args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cachalot-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}
