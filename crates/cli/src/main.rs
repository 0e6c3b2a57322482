//! The `cachalot` command: the library's [`cachalot_cli::run`] on this process's arguments.

use std::process::ExitCode;

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
        if cachalot_cli::is_closed_stdout_panic(msg) {
            std::process::exit(0);
        }
        default_hook(info);
    }));
    cachalot_cli::run(std::env::args_os())
}
