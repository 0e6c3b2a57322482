//! The fuzz corpora (`fuzz/regressions/<target>/`, every reproducer of issue #10 among them) and
//! the divergence reproducers (`tests/fixtures/reproducers/*.csv`) through the fuzz targets'
//! checks, on the stable toolchain: a regression fails `cargo test` without nightly.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `check` on every file of `dir`; returns how many.
fn run_dir(dir: &Path, check: fn(&[u8])) -> usize {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "{} fails its fuzz check", f.display());
    }
    files.len()
}

fn corpus(target: &str, check: fn(&[u8])) {
    let n = run_dir(&root().join("fuzz/regressions").join(target), check);
    assert!(n > 0, "empty corpus for {target}");
    eprintln!("{target}: {n} corpus inputs pass");
}

#[test]
fn rmm_csv_corpus() {
    corpus("rmm_csv", cachalot_fuzz_checks::rmm_csv);
}

#[test]
fn reproducer_traces_read_cleanly() {
    let n = run_dir(
        &root().join("tests/fixtures/reproducers"),
        cachalot_fuzz_checks::rmm_csv,
    );
    assert!(n > 10);
}

#[test]
fn gzip_trace_corpus() {
    corpus("gzip_trace", cachalot_fuzz_checks::gzip_trace);
}

#[test]
fn config_corpus() {
    corpus("config", cachalot_fuzz_checks::config);
}

#[test]
fn snapshot_reader_corpus() {
    corpus("snapshot_reader", cachalot_fuzz_checks::snapshot);
}

#[test]
fn allocator_ops_corpus() {
    corpus("allocator_ops", cachalot_fuzz_checks::allocator_ops);
}
