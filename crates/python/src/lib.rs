//! `cachalot._native`: the Python package's native module.
//!
//! One shared object serves three callers:
//! - Python: the functions below (the API in `python/cachalot/` wraps them);
//! - the `cachalot` console script: [`cli_main`] runs the Rust CLI's own entry point, so the
//!   commands and their output are the Rust binary's;
//! - PyTorch: this object exports the C functions of `cachalot-capi` (`cachalot_malloc`,
//!   `cachalot_free`, …), so `torch.cuda.memory.CUDAPluggableAllocator(cachalot._native.__file__,
//!   "cachalot_malloc", "cachalot_free")` needs no second library.

mod api;
mod gpus;
mod interrupt;
mod output;
mod predict;

use pyo3::prelude::*;

// Linked for its exported C functions, which nothing in Rust calls.
use cachalot_capi as _;

/// Runs the `cachalot` command line `argv` (program name first) with the GIL released and
/// returns its exit status. Output goes to the process's stdout and stderr, as the binary's.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    quiet_closed_stdout();
    py.detach(move || {
        let code = std::panic::catch_unwind(|| cachalot_cli::run(argv));
        match code {
            Ok(code) => cachalot_cli::status_number(code),
            Err(p) => {
                let msg = cachalot_cli::panic_message(&*p);
                if cachalot_cli::is_closed_stdout_panic(msg) {
                    0
                } else {
                    use std::io::Write;
                    let _ = writeln!(std::io::stderr(), "cachalot: internal error: {msg}");
                    2
                }
            }
        }
    })
}

/// `println!` panics when stdout is a closed pipe (`cachalot ... | head`; Python ignores
/// SIGPIPE, so the write fails instead of ending the process); like the Rust binary, that is a
/// quiet normal end, not a backtrace. Other panics still reach the previous hook.
fn quiet_closed_stdout() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| cachalot_cli::quiet_closed_stdout(|| {}));
}

/// The subcommands the Rust CLI serves (the Python front end adds its own).
#[pyfunction]
fn cli_subcommands() -> Vec<String> {
    cachalot_cli::subcommands()
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(cli_subcommands, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(api::replay, m)?)?;
    m.add_function(wrap_pyfunction!(api::tune, m)?)?;
    m.add_function(wrap_pyfunction!(api::compare, m)?)?;
    m.add_function(wrap_pyfunction!(api::explain, m)?)?;
    m.add_function(wrap_pyfunction!(api::convert, m)?)?;
    m.add_function(wrap_pyfunction!(predict::predict, m)?)?;
    m.add_function(wrap_pyfunction!(api::parse_config, m)?)?;
    m.add_function(wrap_pyfunction!(api::parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(api::env_conf, m)?)?;
    m.add_function(wrap_pyfunction!(output::write_output, m)?)?;
    m.add_function(wrap_pyfunction!(output::check_output, m)?)?;
    m.add_function(wrap_pyfunction!(api::parse_capacity, m)?)?;
    m.add_function(wrap_pyfunction!(api::torch_release, m)?)?;
    m.add_function(wrap_pyfunction!(api::torch_stats_absent, m)?)?;
    m.add_function(wrap_pyfunction!(gpus::gpus, m)?)?;
    m.add_function(wrap_pyfunction!(gpus::gpu_key, m)?)?;
    m.add_function(wrap_pyfunction!(gpus::smallest_gpu, m)?)?;
    m.add_function(wrap_pyfunction!(gpus::gpu_table, m)?)?;
    m.add_function(wrap_pyfunction!(gpus::gpu_alias_note, m)?)?;
    m.add_class::<gpus::GpuRow>()?;
    let py = m.py();
    m.add("CachalotError", py.get_type::<api::CachalotError>())?;
    m.add("ConfigError", py.get_type::<api::ConfigError>())?;
    m.add("TraceError", py.get_type::<api::TraceError>())?;
    m.add("ArgumentError", api::ArgumentError::type_object(py)?)?;
    Ok(())
}
