//! Helpers shared by the tests that load `libcachalot.so`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `crates/capi`.
pub fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo profile this test binary was built with (`target/<dir>/deps/<test>`): `release`
/// for `cargo test --release`, else `dev`.
fn profile() -> String {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name);
    match dir.and_then(|d| d.to_str()) {
        None | Some("debug") => "dev".into(),
        Some(other) => other.into(),
    }
}

/// `libcachalot.so`, built once per test process with `cargo build -p cachalot-capi --lib`
/// in the tests' own profile, so `cargo test --release` reuses its build (cargo does not build
/// a cdylib for integration tests, and an rlib next to it would collide with the `cachalot`
/// crate's). The path comes from cargo's own artifact report.
pub fn library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "cachalot-capi",
                "--lib",
                "--profile",
                &profile(),
                "--message-format=json",
            ])
            .current_dir(crate_dir())
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building libcachalot failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| {
                m["reason"] == "compiler-artifact" && m["target"]["name"] == "cachalot_capi"
            })
            .filter(|m| m["package_id"].as_str().is_some_and(|p| p.contains("capi")))
            .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
            .filter_map(|f| f.as_str().map(PathBuf::from))
            .find(|f| {
                f.extension().and_then(|e| e.to_str()) == Some(std::env::consts::DLL_EXTENSION)
            })
            .expect("cargo reported the cdylib")
    })
    .clone()
}

/// A path in this test binary's scratch folder (under cargo's `target/tmp`, reused by later
/// runs instead of piling up).
pub fn scratch(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.file_stem().unwrap().to_string_lossy().into_owned();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{bin}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Removes every variable the library reads, so a test sets exactly what it means.
pub fn clean_env(cmd: &mut Command) {
    for v in [
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "CACHALOT_ALLOC_CONF",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "CACHALOT_DEVICE",
        "CACHALOT_SIM_CAPACITY",
        "CACHALOT_VERBOSE",
    ] {
        cmd.env_remove(v);
    }
}

#[allow(unused_imports)] // not every test binary skips
pub use cachalot_testkit::skip;

/// Compiles `tests/c/SOURCE` with gcc against `include/cachalot.h` and the library, into this
/// test binary's scratch folder as NAME, and returns the executable's path.
pub fn build_c_program(source: &str, name: &str) -> PathBuf {
    compile_c(&crate_dir().join("tests/c").join(source), name, "-O1")
}

/// Compiles the C file `source` at optimization level `opt` (e.g. `-O2`) against
/// `include/cachalot.h` and the library, into the scratch folder as NAME.
pub fn compile_c(source: &Path, name: &str, opt: &str) -> PathBuf {
    let lib = library();
    let dir = lib.parent().unwrap();
    let exe = scratch(name);
    let part = partial(&exe);
    let out = Command::new("gcc")
        .args(["-std=c11", opt, "-Wall", "-Wextra", "-Werror", "-pthread"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(source)
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-lcachalot_capi", "-o"])
        .arg(&part)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    install(&part, &exe);
    exe
}

/// Where a build writes `exe` before [`install`] puts it in place: a name of this process's
/// own. Test runners such as nextest run each test in its own process, several at once, so two
/// processes may build the same program while a third runs it; writing over an executable that
/// is running fails ("text file busy"), renaming over it does not.
pub fn partial(exe: &Path) -> PathBuf {
    let mut name = exe.file_name().unwrap().to_os_string();
    name.push(format!(".{}.partial", std::process::id()));
    exe.with_file_name(name)
}

/// Renames the finished build `part` (from [`partial`]) onto `exe`, atomically.
pub fn install(part: &Path, exe: &Path) {
    std::fs::rename(part, exe)
        .unwrap_or_else(|e| panic!("cannot move {} to {}: {e}", part.display(), exe.display()));
}

/// What a C program printed.
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
}

impl Printed {
    /// The "key value" lines of standard output.
    pub fn keys(&self) -> BTreeMap<&str, &str> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once(' '))
            .collect()
    }
}

/// Builds `tests/c/SOURCE` and runs it on the simulated device with `env` set and none of
/// the library's other variables; panics unless it succeeds. `None`, after saying why, where
/// gcc is not installed.
pub fn run_c_program(source: &str, env: &[(&str, &str)]) -> Option<Printed> {
    if Command::new("gcc").arg("--version").output().is_err() {
        skip(format!("gcc not found; the {source} test needs it"));
        return None;
    }
    let name = source.trim_end_matches(".c");
    let mut cmd = Command::new(build_c_program(source, name));
    clean_env(&mut cmd);
    cmd.env("CACHALOT_DEVICE", "sim").envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let printed = Printed {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        out.status.success(),
        "{source} failed: {}\n{}",
        printed.stdout,
        printed.stderr
    );
    Some(printed)
}
