//! Fidelity: every trace × scenario of the oracle's golden results, replayed by cachalot,
//! must give the same device calls (row for row), statistics, counts and OOM messages.
//!
//! The fixtures are copies of `shared/golden` and the traces it replays
//! (`tests/fixtures/{golden,traces}` at the workspace root). Set `GOLDEN_FILTER=substring`
//! to run a subset (matched against `trace/scenario`).

use cachalot_core::AllocConf;
use cachalot_core::config::{Settings, parse_pytorch};
use cachalot_replay::report::{ReportMeta, report_json, write_segments};
use cachalot_replay::{ReplayOptions, ReplayReport, load_rmm, replay};
use cachalot_sim::SimConfig;
use cachalot_testkit::{ORACLE_FIELDS, fixtures, gunzip, json_diff, log_diff, read_json};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The replay options of a golden scenario: its configuration and capacity, with the
/// device-call log on.
fn options(conf: &AllocConf, capacity: u64) -> ReplayOptions {
    ReplayOptions {
        conf: conf.clone(),
        sim: SimConfig::with_capacity(capacity),
        log_segments: true,
        ..ReplayOptions::default()
    }
}

/// The device-call log of `report` as the oracle writes it (`--segments`).
fn segments_csv(report: &ReplayReport) -> String {
    let mut csv = Vec::new();
    write_segments(&mut csv, &report.segments).unwrap();
    String::from_utf8(csv).unwrap()
}

/// The oracle fields of `report` that differ from `golden`.
fn json_diffs(
    report: &ReplayReport,
    conf: &AllocConf,
    trace: &cachalot_replay::LoadedTrace,
    capacity: u64,
    golden: &Value,
) -> Vec<String> {
    let ours = report_json(report, conf, &trace.stats, capacity, &ReportMeta::default());
    let mut diffs = Vec::new();
    for key in ORACLE_FIELDS {
        json_diff(key, &ours[key], &golden[key], &mut diffs);
    }
    diffs
}

/// Scenarios checked and the ones that differed.
#[derive(Default)]
struct Tally {
    checked: usize,
    failures: Vec<String>,
}

impl Tally {
    fn record(&mut self, id: &str, mut diffs: Vec<String>) {
        self.checked += 1;
        if !diffs.is_empty() {
            diffs.truncate(6);
            self.failures
                .push(format!("{id}:\n    {}", diffs.join("\n    ")));
        }
    }

    fn finish(self, what: &str, filter: &str) {
        assert!(self.checked > 0, "no {what} matched the filter {filter:?}");
        assert!(
            self.failures.is_empty(),
            "{} of {} {what}s differ from the oracle:\n{}",
            self.failures.len(),
            self.checked,
            self.failures.join("\n")
        );
        eprintln!("{} {what}s identical to the oracle", self.checked);
    }
}

fn run_golden(include_expandable: bool) {
    let root = fixtures();
    let index = read_json(&root.join("golden/index.json"));
    let filter = std::env::var("GOLDEN_FILTER").unwrap_or_default();
    let mut tally = Tally::default();
    for (name, entry) in index.as_object().unwrap() {
        let trace_path = root.join(entry["trace"].as_str().unwrap());
        let mut trace = None;
        for (scenario, sc) in entry["scenarios"].as_object().unwrap() {
            let id = format!("{name}/{scenario}");
            let conf_str = sc["PYTORCH_CUDA_ALLOC_CONF"].as_str().unwrap();
            if conf_str.contains("expandable_segments:True") != include_expandable
                || !id.contains(&filter)
            {
                continue;
            }
            let trace = trace.get_or_insert_with(|| load_rmm(&trace_path).unwrap());
            let (conf, _) = parse_pytorch(conf_str).unwrap();
            let capacity = sc["FAKE_CUDA_CAPACITY"].as_u64().unwrap();
            let report = replay(trace, &options(&conf, capacity)).unwrap();
            let golden = read_json(&root.join(format!("golden/{id}.json")));
            let mut diffs = json_diffs(&report, &conf, trace, capacity, &golden);
            let golden_csv = gunzip(&root.join(format!("golden/{id}.segments.csv.gz")));
            diffs.extend(log_diff(
                "segments log",
                &segments_csv(&report),
                &String::from_utf8(golden_csv).unwrap(),
            ));
            tally.record(&id, diffs);
        }
    }
    tally.finish("golden scenario", &filter);
}

#[test]
fn classic_segments_match_the_oracle() {
    run_golden(false);
}

#[test]
fn expandable_segments_match_the_oracle() {
    run_golden(true);
}

/// `backend:cudaMallocAsync` and `PYTORCH_NO_CUDA_MEMORY_CACHING=1` through the replay engine
/// (`tests/fixtures/golden-async`, from `scripts/fixtures/gen_async_golden.py`).
#[test]
fn direct_backends_match_the_oracle() {
    let root = fixtures();
    let index = read_json(&root.join("golden-async/index.json"));
    let filter = std::env::var("GOLDEN_FILTER").unwrap_or_default();
    let mut tally = Tally::default();
    for (name, entry) in index.as_object().unwrap() {
        let trace = load_rmm(&root.join(format!("traces/{name}.csv.gz"))).unwrap();
        for (scenario, sc) in entry["scenarios"].as_object().unwrap() {
            let id = format!("{name}/{scenario}");
            if !id.contains(&filter) {
                continue;
            }
            // The scenario's environment, read through the one settings path.
            let no_caching = sc["PYTORCH_NO_CUDA_MEMORY_CACHING"].as_bool().unwrap();
            let env = |k: &str| match k {
                "PYTORCH_CUDA_ALLOC_CONF" => sc[k].as_str().map(String::from),
                "PYTORCH_NO_CUDA_MEMORY_CACHING" if no_caching => Some("1".into()),
                _ => None,
            };
            let conf = Settings::from_env_with(env).unwrap().conf;
            let capacity = sc["FAKE_CUDA_CAPACITY"].as_u64().unwrap();
            let golden = read_json(&root.join(format!("golden-async/{id}.json")));
            let mut diffs = Vec::new();
            match replay(&trace, &options(&conf, capacity)) {
                Ok(report) => {
                    diffs = json_diffs(&report, &conf, &trace, capacity, &golden);
                    let rows = report.segments.len() as u64;
                    if Some(rows) != golden["segments_rows"].as_u64() {
                        diffs.push(format!(
                            "segments log: {rows} rows, oracle {}",
                            golden["segments_rows"]
                        ));
                    }
                    // Large logs are stored only as a digest of the whole CSV, header included.
                    let sha = format!("{:x}", Sha256::digest(segments_csv(&report)));
                    if Some(sha.as_str()) != golden["segments_sha256"].as_str() {
                        diffs.push("segments log differs (SHA-256)".into());
                    }
                }
                Err(e) if golden.get("fatal_error").is_some() => {
                    let want = golden["fatal_error"]["message"]
                        .as_str()
                        .unwrap_or_default();
                    if !e
                        .to_string()
                        .contains(want.lines().next().unwrap_or_default())
                    {
                        diffs.push(format!("fatal error: cachalot '{e}', oracle '{want}'"));
                    }
                }
                Err(e) => diffs.push(format!("replay failed: {e}")),
            }
            tally.record(&id, diffs);
        }
    }
    tally.finish("direct-backend scenario", &filter);
}

/// The private-pool, `empty_cache` and `record_stream` rows: every oracle example trace that
/// uses them, under several configurations and capacities (`tests/fixtures/pools`, from
/// `scripts/fixtures/gen_pool_fixtures.py`). Also compared: the per-pool report and the fatal error of
/// a misused row; a trace the oracle rejects (exit 65) must be rejected with its message.
#[test]
fn pool_rows_match_the_oracle() {
    let root = fixtures().join("pools");
    let index = read_json(&root.join("index.json"));
    let filter = std::env::var("GOLDEN_FILTER").unwrap_or_default();
    let mut tally = Tally::default();
    for (name, scenarios) in index.as_object().unwrap() {
        let trace_path = root.join(format!("{name}.csv"));
        for (scenario, sc) in scenarios.as_object().unwrap() {
            let id = format!("{name}/{scenario}");
            if !id.contains(&filter) {
                continue;
            }
            let mut diffs = Vec::new();
            let trace = match load_rmm(&trace_path) {
                Ok(t) => t,
                Err(e) => {
                    let want = sc["stderr"].as_str().unwrap_or("(the oracle read it)");
                    if sc["exit"] != 65
                        || want.strip_prefix("torch_oracle: ") != Some(&e.to_string())
                    {
                        diffs.push(format!("trace rejected: cachalot '{e}', oracle '{want}'"));
                    }
                    tally.record(&id, diffs);
                    continue;
                }
            };
            if sc["exit"] == 65 {
                tally.record(
                    &id,
                    vec![format!("trace read, oracle rejected it: {}", sc["stderr"])],
                );
                continue;
            }
            let (mut conf, _) =
                parse_pytorch(sc["PYTORCH_CUDA_ALLOC_CONF"].as_str().unwrap()).unwrap();
            if sc["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1" {
                conf.backend = cachalot_core::Backend::Uncached;
            }
            let capacity = sc["FAKE_CUDA_CAPACITY"].as_u64().unwrap();
            let golden = read_json(&root.join(format!("{id}.json")));
            // A misused row stops the replay with the report as of then, as the oracle does.
            let replayed = replay(&trace, &options(&conf, capacity)).or_else(|e| match e.report {
                Some(r) => Ok(*r),
                None => Err(e),
            });
            match replayed {
                Ok(report) => {
                    diffs.extend(json_diffs(&report, &conf, &trace, capacity, &golden));
                    let golden_csv =
                        std::fs::read_to_string(root.join(format!("{id}.segments.csv"))).unwrap();
                    diffs.extend(log_diff(
                        "segments log",
                        &segments_csv(&report),
                        &golden_csv,
                    ));
                }
                Err(e) => diffs.push(format!("replay failed: {e}")),
            }
            tally.record(&id, diffs);
        }
    }
    tally.finish("pool scenario", &filter);
}
