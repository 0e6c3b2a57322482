//! What the workspace's tests share, so that each rule is written once: where the fixtures
//! are, where `shared/` and the oracle are (one variable each), how a skipped test says why,
//! where a test writes its scratch files, lists what is left there and makes a FIFO, how a
//! test compiles C with gcc, runs a command without the developer's allocator settings, reads
//! a gzip fixture, compares JSON with the oracle's, and where the simulated CUDA driver is
//! (`driver`). A dev-dependency only; nothing ships with it.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod driver;
pub use driver::{SimulatedDriver, on_simulated_driver, simulated_driver, torch_python};

/// The variable that points the tests at an oracle command (default:
/// `shared/oracle/oracle` beside the checkout).
pub const ORACLE_VAR: &str = "CACHALOT_ORACLE";
/// The variable that points the tests at the `shared/` folder (default: beside the checkout).
pub const SHARED_VAR: &str = "CACHALOT_SHARED";

/// A fresh scratch folder for one test, removed with everything in it when the value is
/// dropped (also when the test fails), so that test runs leave nothing in the temp dir.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cachalot-test-")
        .tempdir()
        .expect("cannot create a scratch folder in the temp dir")
}

/// The names of the entries of `dir`, sorted: what a test compares to prove that an operation
/// left exactly the files it should (no temporary file, the previous file kept).
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Makes a named pipe (FIFO) at `path`, readable and writable by its owner only.
pub fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .unwrap_or_else(|e| panic!("cannot make a FIFO at {}: {e}", path.display()));
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/fixtures` at the workspace root: the files tests read, in the repository.
pub fn fixtures() -> PathBuf {
    workspace().join("tests/fixtures")
}

/// A file under [`fixtures`], e.g. `fixture("traces/gpt2-train.csv.gz")`.
pub fn fixture(relative: &str) -> PathBuf {
    fixtures().join(relative)
}

/// The `shared/` folder beside the checkout (`CACHALOT_SHARED` overrides), if it is there.
/// CI has it read-only; a fresh clone elsewhere may not.
pub fn shared() -> Option<PathBuf> {
    let dir = std::env::var_os(SHARED_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("../shared"));
    dir.is_dir().then_some(dir)
}

/// The oracle command (`CACHALOT_ORACLE`, else `shared/oracle/oracle` beside the checkout),
/// once its `setup.sh --check` passes; otherwise why it cannot be used.
pub fn oracle() -> Result<PathBuf, String> {
    let path = match std::env::var_os(ORACLE_VAR) {
        Some(p) => PathBuf::from(p),
        None => workspace().join("../shared/oracle/oracle"),
    };
    if !path.exists() {
        return Err(format!(
            "no oracle at {} (set {ORACLE_VAR})",
            path.display()
        ));
    }
    let setup = path.with_file_name("setup.sh");
    let ok = Command::new(&setup)
        .arg("--check")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return Err(format!(
            "oracle not set up ({} --check fails)",
            setup.display()
        ));
    }
    Ok(path)
}

/// Torch `release`'s own allocator on the simulated device (`"2.9"`), built by
/// `scripts/versions/oracle.sh X.Y` into `CACHALOT_ORACLE_VERSIONS` (else `~/.cache`)
/// `/cachalot-oracle-X.Y`, once its `--check` passes; otherwise why not, with the command
/// that builds it.
pub fn release_oracle(release: &str) -> Result<PathBuf, String> {
    let base = std::env::var_os("CACHALOT_ORACLE_VERSIONS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or("HOME is not set")?;
    let script = workspace().join("scripts/versions/oracle.sh");
    let mut check = Command::new(&script);
    check.arg(release).arg("--check");
    if let Some(dir) = shared() {
        check.env(SHARED_VAR, dir);
    }
    if !check.output().is_ok_and(|o| o.status.success()) {
        return Err(format!(
            "torch {release}'s oracle is not built: run {} {release}",
            script.display()
        ));
    }
    Ok(base.join(format!("cachalot-oracle-{release}/oracle")))
}

/// Says why (part of) a test did not run. Written to stderr directly: libtest captures
/// `eprintln!`, and the reason for a skip should show in a plain `cargo test`.
pub fn skip(why: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// The C compiler `name` (`gcc`, `g++`) as a command to add arguments to; `None` after
/// [`skip`] when it is not installed. Run it with [`succeed`].
pub fn compiler(name: &str) -> Option<Command> {
    if Command::new(name).arg("--version").output().is_err() {
        skip(format!("{name} not found"));
        return None;
    }
    Some(Command::new(name))
}

/// Runs `cmd` and panics with its stderr unless it succeeds.
pub fn succeed(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `cmd` and returns its standard output; panics with both of its outputs unless it
/// succeeds.
pub fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The variables torch 2.15 and cachalot read an allocator configuration from. Commands
/// under test run without them ([`command`]), so that a developer's own settings never change
/// a result.
pub const CONFIG_VARS: &[&str] = &[
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "CACHALOT_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "PYTORCH_NO_HIP_MEMORY_CACHING",
];

/// `program` as a command with none of [`CONFIG_VARS`] set.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for var in CONFIG_VARS {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `program args…` as [`command`] does and waits for it; panics only if it cannot start.
pub fn output<S: AsRef<OsStr>>(program: impl AsRef<OsStr>, args: &[S]) -> Output {
    let mut cmd = command(program);
    cmd.args(args);
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// The decompressed bytes of a gzip file (every member, as `gzip -d` reads them).
pub fn gunzip(path: &Path) -> Vec<u8> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes = Vec::new();
    flate2::read::MultiGzDecoder::new(file)
        .read_to_end(&mut bytes)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
}

/// A JSON file, parsed.
pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fields of the oracle's JSON report that a replay must reproduce exactly (the others
/// describe the run: paths, timings, the oracle's build).
pub const ORACLE_FIELDS: &[&str] = &[
    "trace_stats",
    "events",
    "peak",
    "final",
    "num_device_alloc",
    "num_device_free",
    "num_alloc_retries",
    "num_ooms",
    "ooms",
    "device_stats",
    "fake_device",
    "cudaMemGetInfo_at_end",
    "fatal_error",
    "pools",
];

/// Compares cachalot's JSON (`ours`) with the oracle's (`theirs`) below `path`, numbers by
/// value (`1` equals `1.0`), and pushes one line for each path that differs. Keys only
/// cachalot writes are not compared: the oracle's output is the reference.
pub fn json_diff(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in y {
                match x.get(k) {
                    Some(u) => json_diff(&format!("{path}.{k}"), u, v, out),
                    None => out.push(format!("{path}.{k}: missing (oracle {v})")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                json_diff(&format!("{path}[{i}]"), u, v, out);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if ours == theirs => {}
        _ => out.push(format!("{path}: cachalot {ours}, oracle {theirs}")),
    }
}

/// Where two line-oriented logs (device-call CSVs) first differ, as one line naming the
/// row, both lengths and both rows; `None` when they are equal.
pub fn log_diff(what: &str, ours: &str, theirs: &str) -> Option<String> {
    if ours == theirs {
        return None;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), theirs.lines().collect());
    let row = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    Some(format!(
        "{what} differ at row {row} ({} rows, oracle {}): cachalot `{}`, oracle `{}`",
        a.len(),
        b.len(),
        a.get(row).unwrap_or(&"<end>"),
        b.get(row).unwrap_or(&"<end>")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_are_found_from_any_crate() {
        assert!(fixture("traces").is_dir(), "{}", fixtures().display());
        assert!(workspace().join("Cargo.toml").is_file());
    }

    #[test]
    fn json_diff_names_each_differing_path_and_compares_numbers_by_value() {
        let ours = serde_json::json!({"a": 1, "b": [1, 2], "c": {"d": "x"}, "extra": 0});
        let theirs = serde_json::json!({"a": 1.0, "b": [1, 3], "c": {"d": "y", "e": 5}});
        let mut out = Vec::new();
        json_diff("r", &ours, &theirs, &mut out);
        assert_eq!(
            out,
            [
                "r.b[1]: cachalot 2, oracle 3",
                "r.c.d: cachalot \"x\", oracle \"y\"",
                "r.c.e: missing (oracle 5)",
            ]
        );
        let mut none = Vec::new();
        json_diff("r", &theirs, &theirs, &mut none);
        assert!(none.is_empty(), "{none:?}");
        let mut lengths = Vec::new();
        json_diff(
            "r",
            &serde_json::json!([1]),
            &serde_json::json!([1, 2]),
            &mut lengths,
        );
        assert_eq!(lengths, ["r: cachalot [1], oracle [1,2]"]);
    }

    #[test]
    fn log_diff_names_the_first_differing_row() {
        assert_eq!(log_diff("calls", "a\nb\n", "a\nb\n"), None);
        assert_eq!(
            log_diff("calls", "a\nb\nc\n", "a\nx\n").as_deref(),
            Some("calls differ at row 1 (3 rows, oracle 2): cachalot `b`, oracle `x`")
        );
        assert_eq!(
            log_diff("calls", "a\n", "a\nz\n").as_deref(),
            Some("calls differ at row 1 (1 rows, oracle 2): cachalot `<end>`, oracle `z`")
        );
    }

    #[test]
    fn commands_run_without_the_allocator_variables() {
        let cmd = command("env");
        let removed: Vec<&OsStr> = cmd
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(key, _)| key)
            .collect();
        for var in CONFIG_VARS {
            assert!(removed.contains(&OsStr::new(var)), "{var} is not removed");
        }
        assert!(output("true", &[] as &[&str]).status.success());
    }

    #[test]
    fn a_missing_compiler_is_a_skip_not_a_failure() {
        assert!(compiler("no-such-compiler-here").is_none());
    }
}
