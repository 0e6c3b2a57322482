//! A release oracle's results kept between test runs, as the golden files keep torch 2.15's:
//! the oracle is a deterministic program, so its answer on one trace and case is a function
//! of its own files, the trace's bytes and the case. Each answer is stored under
//! `ORACLE_DIR/results/KEY.json.gz`, KEY a SHA-256 of all three; an oracle rebuilt from other
//! files, a changed trace or another case has another key and is run. cachalot's side of a
//! comparison always runs. `CACHALOT_ORACLE_RERUN=1` runs every oracle again.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Case, Outcome, try_run_oracle};

/// One release oracle and the folder of its remembered results.
pub struct Remembered {
    oracle: PathBuf,
    results: PathBuf,
    identity: String,
}

impl Remembered {
    /// `oracle` is the script `scripts/versions/oracle.sh` installs; its identity is the SHA-256
    /// of every file in its folder but the results (the script, the program, the libraries).
    pub fn new(oracle: &Path) -> Self {
        let dir = oracle.parent().expect("the oracle is a file in its folder");
        let results = dir.join("results");
        let mut files = Vec::new();
        list_files(dir, &results, &mut files);
        files.sort();
        let mut h = Sha256::new();
        for f in files {
            h.update(f.strip_prefix(dir).unwrap().to_string_lossy().as_bytes());
            h.update(fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display())));
        }
        Remembered {
            oracle: oracle.to_path_buf(),
            results,
            identity: format!("{:x}", h.finalize()),
        }
    }

    /// The oracle's outcome on `trace` (whose bytes hash to `trace_id`, see [`file_id`]) under
    /// `case`: the remembered one, else a run of the oracle, which is then remembered.
    pub fn run(
        &self,
        trace: &Path,
        trace_id: &str,
        case: &Case,
        scratch: &Path,
    ) -> Result<Outcome, String> {
        let key = format!(
            "{:x}",
            Sha256::digest(format!(
                "{}\n{trace_id}\n{}\n{}\n{:?}\n{:?}\n{}",
                self.identity,
                case.capacity,
                case.conf,
                case.no_cuda_caching,
                case.no_hip_caching,
                case.ignore_streams
            ))
        );
        let file = self.results.join(format!("{key}.json.gz"));
        if std::env::var_os("CACHALOT_ORACLE_RERUN").is_none()
            && let Some(outcome) = read(&file)
        {
            return Ok(outcome);
        }
        let outcome = try_run_oracle(&self.oracle, trace, case, scratch)?;
        if let Err(e) = write(&file, &outcome) {
            // a read-only cache: the comparison goes on, the next run asks the oracle again
            cachalot_testkit::skip(format!("cannot remember in {}: {e}", file.display()));
        }
        Ok(outcome)
    }
}

/// The SHA-256 of a file's bytes.
pub fn file_id(path: &Path) -> String {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    format!("{:x}", Sha256::digest(bytes))
}

fn list_files(dir: &Path, skip: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path == skip || path.file_name().is_some_and(|n| n == ".lock") {
            continue;
        }
        if path.is_dir() {
            list_files(&path, skip, out);
        } else {
            out.push(path);
        }
    }
}

/// A remembered outcome, or `None` when there is none (or it cannot be read: then the oracle
/// runs again and writes it anew).
fn read(file: &Path) -> Option<Outcome> {
    let mut text = String::new();
    GzDecoder::new(fs::File::open(file).ok()?)
        .read_to_string(&mut text)
        .ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    Some(Outcome {
        status: i32::try_from(v["status"].as_i64()?).ok()?,
        json: v["json"].clone(),
        segments: v["segments"].as_str()?.to_string(),
    })
}

/// Remembers `outcome` in `file`, whole or not at all (written beside it, then renamed).
fn write(file: &Path, outcome: &Outcome) -> std::io::Result<()> {
    let dir = file.parent().unwrap();
    fs::create_dir_all(dir)?;
    let value = json!({
        "status": outcome.status,
        "json": outcome.json,
        "segments": outcome.segments,
    });
    let part = dir.join(format!(".{}.{}", std::process::id(), file_name(file)));
    let written = (|| {
        let mut gz = GzEncoder::new(fs::File::create(&part)?, Compression::fast());
        gz.write_all(value.to_string().as_bytes())?;
        gz.finish()?;
        fs::rename(&part, file)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&part);
    }
    written
}

fn file_name(file: &Path) -> String {
    file.file_name().unwrap().to_string_lossy().into_owned()
}
