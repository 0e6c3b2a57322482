//! The `cachalot` command: the library's [`cachalot_cli::run`] on this process's arguments.

use std::process::ExitCode;

fn main() -> ExitCode {
    // `println!` panics when stdout is a closed pipe; end quietly instead, as `head` expects.
    cachalot_cli::quiet_closed_stdout(|| std::process::exit(0));
    cachalot_cli::run(std::env::args_os())
}
