//! The capture runtime's simulated CUDA driver (`libcuda.so.1` of
//! `python/cachalot/capture/runtime`) for Rust tests: built once per machine by the package's
//! own builder (`python/cachalot/capture/build.py`, which needs only the standard library, the
//! torch venv's NVIDIA headers and g++), and the environment that makes cudarc load it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The Python whose torch the runtime is built against: `CACHALOT_TORCH_PYTHON`, else the
/// venv `scripts/python_env.sh --torch` makes (as `tests/python/conftest.py` finds it).
pub fn torch_python() -> PathBuf {
    match std::env::var_os("CACHALOT_TORCH_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/cachalot-torch/bin/python"),
    }
}

/// A simulated driver ready to load: set [`SimulatedDriver::env`] on a child process and the
/// CUDA device it opens is the runtime's simulated GPU.
#[derive(Clone, Debug)]
pub struct SimulatedDriver {
    /// The built runtime (`libcuda.so.1`, `libcudart.so.13`, …).
    pub runtime: PathBuf,
    /// A folder holding `libcuda.so` → the runtime's `libcuda.so.1`: cudarc asks for
    /// `libcuda.so` first, which on a GPU machine would otherwise be the real driver.
    pub links: PathBuf,
}

impl SimulatedDriver {
    /// `LD_LIBRARY_PATH`, and the variables that mark the child as running on the simulated
    /// driver (`CACHALOT_SIMULATED_DRIVER=1`, which tests read for what only a real GPU does).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut path = format!("{}:{}", self.links.display(), self.runtime.display());
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            path = format!("{path}:{}", old.to_string_lossy());
        }
        vec![
            ("LD_LIBRARY_PATH", path),
            ("CACHALOT_SIMULATED_DRIVER", "1".into()),
        ]
    }
}

/// Whether this process was started on the simulated driver by [`SimulatedDriver::env`].
pub fn on_simulated_driver() -> bool {
    std::env::var("CACHALOT_SIMULATED_DRIVER").as_deref() == Ok("1")
}

/// The simulated driver, built on first use (about a minute, once per machine: the builder
/// caches it under `~/.cache/cachalot`), or why it cannot be built here (no torch venv, no
/// g++ or nm, not Linux): callers skip with that reason. A build that starts and fails is a
/// test failure (a panic with the builder's output), not a skip.
pub fn simulated_driver() -> Result<SimulatedDriver, String> {
    static BUILT: OnceLock<Result<SimulatedDriver, String>> = OnceLock::new();
    BUILT.get_or_init(build).clone()
}

fn build() -> Result<SimulatedDriver, String> {
    if !cfg!(target_os = "linux") {
        return Err("the simulated CUDA driver is built for Linux".into());
    }
    let python = torch_python();
    if !python.exists() {
        return Err(format!(
            "no torch venv at {} (scripts/python_env.sh --torch makes it; or set \
             CACHALOT_TORCH_PYTHON): the simulated driver is built against its headers",
            python.display()
        ));
    }
    for tool in ["g++", "gcc", "nm"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Err(format!(
                "{tool} not found: the simulated driver cannot be built"
            ));
        }
    }
    let builder = crate::workspace().join("python/cachalot/capture/build.py");
    let out = Command::new(&python)
        .arg(&builder)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} {}: {e}", python.display(), builder.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} {} failed:\n{stdout}{}",
        python.display(),
        builder.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let runtime = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        runtime.join("libcuda.so.1").is_file(),
        "the builder printed {runtime:?}, which holds no libcuda.so.1"
    );
    let links = crate::workspace().join("target/tmp/simulated-driver");
    std::fs::create_dir_all(&links).unwrap();
    let link = links.join(format!("libcuda.so.{}", std::process::id()));
    // One link per process, renamed into place: concurrent test binaries never see none.
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(runtime.join("libcuda.so.1"), &link).unwrap();
    std::fs::rename(&link, links.join("libcuda.so")).unwrap();
    Ok(SimulatedDriver { runtime, links })
}
