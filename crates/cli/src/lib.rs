//! The `cachalot` command as a library: the Rust binary (`main.rs`) and the Python package's
//! console script (`cachalot._native.cli_main`) both call [`run`], so the two give the same
//! commands and the same output. Each subcommand lives in its own module under `cmd/` and
//! calls library functions; errors are printed once, here.

// Each command parses, calls the application layer (`cachalot-app`) and prints.
mod args;
mod cmd;

use std::ffi::OsString;
use std::process::ExitCode;

use cachalot_trace::interrupt;
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

/// The names of the subcommands [`run`] serves, for front ends that add their own (the
/// Python package's `record`) and pass the rest here.
pub fn subcommands() -> Vec<String> {
    use clap::CommandFactory;
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// Runs the command line `args` (the program name first) and returns the exit status:
/// 0 success, 2 an error (printed on stderr), or what clap uses for bad arguments, 130/143
/// after Ctrl-C/SIGTERM ([`handle_signals`]). Help and version go to stdout. Nothing here
/// exits the process, except a signal the command does not answer within [`GRACE`].
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    handle_signals();
    let status = run_command(args);
    // A stop asked during the command: whatever it returned may be cut short (replays end
    // early on a stop), so it is reported as the interruption, with the shell's status.
    match interrupt::requested() {
        Some(i) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "cachalot: {i}");
            ExitCode::from(i.exit_status())
        }
        None => status,
    }
}

fn run_command<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and --version are "errors" to clap that print to stdout and succeed.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
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
        // [`run`] says it once, with the signal.
        Err(_) if interrupt::requested().is_some() => ExitCode::from(2),
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "cachalot: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// How long a command has, after SIGINT or SIGTERM, to stop by itself (its loops check the
/// stop flag; its writes fail and remove their temporary files) before the process ends
/// anyway (a read blocked in the kernel, a long step that does not check).
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Installs, once per process, the handling of SIGINT and SIGTERM for [`run`]: the first
/// signal asks the running command to stop ([`interrupt::request`]), so that it returns with
/// nothing half-written and [`run`] exits 128 + the signal (130, 143). If the command has not
/// returned [`GRACE`] later, or at a second signal, the temporary files in flight are removed
/// and the process exits with that status at once; a file being replaced keeps its previous
/// content. Where the handlers cannot be installed, the signals keep their default action.
pub fn handle_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("cachalot-signals".to_string())
            .spawn(move || {
                let Some(first) = signals.forever().next() else {
                    return;
                };
                interrupt::request(first);
                let deadline = std::time::Instant::now() + GRACE;
                // A second signal ends the wait at once.
                while std::time::Instant::now() < deadline && signals.pending().next().is_none() {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                interrupt::remove_temp_files();
                let status = interrupt::requested().map_or(130, |i| i.exit_status());
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "cachalot: {}",
                    interrupt::Interrupted { signal: first }
                );
                std::process::exit(i32::from(status));
            });
        drop(spawned);
    });
}

/// The number behind an [`ExitCode`] (the standard library has no getter; every code [`run`]
/// returns is one of these 256).
pub fn status_number(code: ExitCode) -> u8 {
    (0..=u8::MAX)
        .find(|&n| ExitCode::from(n) == code)
        .unwrap_or(2)
}

/// Whether a panic message is `println!` failing on a closed stdout (`cachalot … | head`),
/// which front ends treat as a normal end.
pub fn is_closed_stdout_panic(msg: &str) -> bool {
    msg.contains("failed printing to stdout") && msg.contains("Broken pipe")
}

/// The text of a panic payload (`panic!` with a literal or a formatted message), or "".
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default()
}

/// Installs a panic hook that calls `on_closed` instead of reporting a closed-stdout panic
/// ([`is_closed_stdout_panic`]); every other panic still reaches the hook installed before.
pub fn quiet_closed_stdout(on_closed: fn()) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if is_closed_stdout_panic(panic_message(info.payload())) {
            on_closed();
        } else {
            previous(info);
        }
    }));
}
