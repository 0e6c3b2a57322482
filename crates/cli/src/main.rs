//! The `cachalot` command: thin glue over the library crates. Each subcommand lives in its own
//! module under `cmd/` and calls library functions; errors are printed once, here.

mod args;
mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// PyTorch's CUDA caching allocator, rebuilt in Rust, and the tool that tells you which
/// PYTORCH_CUDA_ALLOC_CONF to set.
#[derive(Parser)]
#[command(name = "cachalot", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay an allocation trace through the allocator on a simulated GPU.
    Replay(cmd::replay::Args),
    /// Parse an allocator configuration and print what every option means.
    Config(cmd::config::Args),
    /// Write any supported input (torch snapshot pickle or JSON, RMM CSV) as an RMM CSV trace.
    Convert(cmd::convert::Args),
    /// Explain the out-of-memory recorded in a torch snapshot, in numbers, and which option
    /// avoids it.
    Explain(cmd::explain::Args),
    /// Which PYTORCH_CUDA_ALLOC_CONF for this trace on this GPU: search and rank configurations.
    Tune(cmd::tune::Args),
    /// Compare configurations on a trace: peaks, minimum capacity, OOMs, retries, device calls.
    Compare(cmd::compare::Args),
}

/// Whether an error comes from writing to a closed pipe (`cachalot … | head`): the reader
/// has all it wanted, so that is a normal end, not a failure.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    // `println!` panics when stdout is a closed pipe; end quietly instead, as `head` expects.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(a) => cmd::replay::run(a),
        Command::Config(a) => cmd::config::run(a),
        Command::Convert(a) => cmd::convert::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Tune(a) => cmd::tune::run(a),
        Command::Compare(a) => cmd::compare::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cachalot: {e:#}");
            ExitCode::from(2)
        }
    }
}
