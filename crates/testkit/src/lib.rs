//! What the workspace's tests share, so that each rule is written once: where the fixtures
//! are, where `shared/` and the oracle are (one variable each), how a skipped test says why,
//! and how a test compiles C with gcc. A dev-dependency only; nothing ships with it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that points the tests at an oracle command (default:
/// `shared/oracle/oracle` beside the checkout).
pub const ORACLE_VAR: &str = "CACHALOT_ORACLE";
/// The variable that points the tests at the `shared/` folder (default: beside the checkout).
pub const SHARED_VAR: &str = "CACHALOT_SHARED";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_are_found_from_any_crate() {
        assert!(fixture("traces").is_dir(), "{}", fixtures().display());
        assert!(workspace().join("Cargo.toml").is_file());
    }

    #[test]
    fn a_missing_compiler_is_a_skip_not_a_failure() {
        assert!(compiler("no-such-compiler-here").is_none());
    }
}
