//! No exported function aborts or unwinds when stderr cannot be written (closed, a closed pipe
//! with SIGPIPE ignored as under Python, `/dev/full`) or when it is called from a thread-exit
//! destructor, and each returns its normal result (`tests/c/hostile.c`, issue 10, crash 3).
//! Skipped, with the reason printed, without gcc.

mod common;

use std::process::{Command, Stdio};

use common::build_c_program;

#[test]
fn exported_functions_survive_unwritable_stderr_and_thread_exit() {
    if Command::new("gcc").arg("--version").output().is_err() {
        return common::skip("gcc not found; the hostile-stderr test needs it");
    }
    let exe = build_c_program("hostile.c", "hostile");
    for mode in ["closed", "pipe", "full", "tls"] {
        let mut cmd = Command::new(&exe);
        cmd.arg(mode);
        common::clean_env(&mut cmd);
        cmd.env("CACHALOT_DEVICE", "sim")
            .env("CACHALOT_SIM_CAPACITY", "1G")
            .stdout(Stdio::piped());
        match mode {
            "full" => {
                let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
                    common::skip("no /dev/full");
                    continue;
                };
                cmd.stderr(full);
            }
            _ => {
                cmd.stderr(Stdio::piped());
            }
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with(&format!("OK {mode} ")),
            "{mode}: status {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if mode == "tls" {
            // stderr worked there: the destructor's errors were reported, not a panic.
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}
