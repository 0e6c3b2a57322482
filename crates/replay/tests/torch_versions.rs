//! Fidelity to older torch releases: every golden trace × scenario, replayed by cachalot with
//! torch X.Y's decisions (`AllocConf::for_torch`, what `replay --torch X.Y` does), must give
//! what torch X.Y's own allocator gives on the simulated device: the same exit class, device
//! calls row for row, statistics, counts and OOM messages. The judge of each release is its
//! oracle, built by `scripts/versions/oracle.sh X.Y` into `~/.cache/cachalot-oracle-X.Y`
//! (`CACHALOT_ORACLE_VERSIONS` names another folder than `~/.cache`); a release whose oracle
//! is not built is skipped with the command that builds it. Where a release rejects a
//! scenario's configuration, the versions table must say so too (`TorchVersion::check`).
//!
//! `TORCH_VERSIONS=2.9,2.10` limits the releases, `GOLDEN_FILTER=substring` the scenarios.

#[allow(unused_imports)]
mod common;

use std::path::PathBuf;
use std::process::Command;

use cachalot_core::config::{TorchVersion, VersionNote};
use cachalot_testkit::{fixtures, read_json, shared, skip};
use common::{Case, differences, run_ours_as, try_run_oracle};

/// torch `v`'s oracle, if `scripts/versions/oracle.sh v --check` passes.
fn version_oracle(v: TorchVersion) -> Result<PathBuf, String> {
    let base = std::env::var_os("CACHALOT_ORACLE_VERSIONS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or("HOME is not set")?;
    let script = cachalot_testkit::workspace().join("scripts/versions/oracle.sh");
    let mut check = Command::new(&script);
    check.arg(v.to_string()).arg("--check");
    if let Some(dir) = shared() {
        check.env("CACHALOT_SHARED", dir);
    }
    let ok = check.output().is_ok_and(|o| o.status.success());
    if !ok {
        return Err(format!(
            "torch {v}'s oracle is not built: run {} {v}",
            script.display()
        ));
    }
    Ok(base.join(format!("cachalot-oracle-{v}/oracle")))
}

/// The releases to check: `TORCH_VERSIONS`, else all but 2.15 (whose oracle is shared/'s,
/// held to cachalot by the golden tests).
fn releases() -> Vec<TorchVersion> {
    match std::env::var("TORCH_VERSIONS") {
        Ok(list) => list
            .split(',')
            .map(|s| s.parse().expect("TORCH_VERSIONS: a list like 2.9,2.10"))
            .collect(),
        Err(_) => TorchVersion::all()
            .filter(|&v| v != TorchVersion::NEWEST)
            .collect(),
    }
}

/// One release's comparison over the golden scenarios; returns what differed.
fn check_release(v: TorchVersion, oracle: &std::path::Path) -> Vec<String> {
    let root = fixtures();
    let index = read_json(&root.join("golden/index.json"));
    let filter = std::env::var("GOLDEN_FILTER").unwrap_or_default();
    let dir = cachalot_testkit::scratch();
    let (mut same, mut rejected, mut not_replayed, mut failures) = (0, 0, 0, Vec::new());
    for (name, entry) in index.as_object().unwrap() {
        let trace = root.join(entry["trace"].as_str().unwrap());
        for (scenario, sc) in entry["scenarios"].as_object().unwrap() {
            let id = format!("{name}/{scenario}");
            if !id.contains(&filter) {
                continue;
            }
            let case = Case {
                capacity: sc["FAKE_CUDA_CAPACITY"].as_u64().unwrap(),
                conf: sc["PYTORCH_CUDA_ALLOC_CONF"].as_str().unwrap().to_string(),
                ..Case::default()
            };
            let theirs = try_run_oracle(oracle, &trace, &case, &dir.path().join("o"))
                .unwrap_or_else(|e| panic!("torch {v}: {e}"));
            if theirs.status == 2 {
                // The release's own parser refused the line: the table must know why.
                rejected += 1;
                if !v.check(&case.conf).iter().any(|n| n.is_rejection()) {
                    failures.push(format!(
                        "{id}: torch {v} rejects {:?}, the versions table accepts it",
                        case.conf
                    ));
                }
                continue;
            }
            if v.check(&case.conf).iter().any(|n| n.is_rejection()) {
                failures.push(format!(
                    "{id}: the versions table rejects {:?} for torch {v}, which accepts it",
                    case.conf
                ));
                continue;
            }
            let notes = v.check(&case.conf);
            if notes.iter().any(|n| {
                matches!(
                    n,
                    VersionNote::Differs {
                        replayed: false,
                        ..
                    }
                )
            }) {
                // A decision cachalot does not replay for this release (DIFFERENCES).
                not_replayed += 1;
                continue;
            }
            let ours = run_ours_as(&trace, &case, v);
            let mut d = differences(&ours, &theirs);
            if d.is_empty() {
                same += 1;
            } else {
                d.truncate(4);
                failures.push(format!("{id}:\n    {}", d.join("\n    ")));
            }
        }
    }
    eprintln!(
        "torch {v}: {same} golden scenarios identical to its oracle, {rejected} rejected by both, \
         {not_replayed} not replayed, {} differ",
        failures.len()
    );
    failures
}

#[test]
fn golden_scenarios_match_each_release() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for v in releases() {
        if !v.replays_decisions() {
            eprintln!(
                "torch {v}: its decisions are not replayed (TorchVersion::replays_decisions)"
            );
            continue;
        }
        let oracle = match version_oracle(v) {
            Ok(o) => o,
            Err(why) => {
                skip(&why);
                continue;
            }
        };
        checked += 1;
        failures.extend(
            check_release(v, &oracle)
                .into_iter()
                .map(|f| format!("torch {v}: {f}")),
        );
    }
    if checked == 0 {
        return;
    }
    assert!(
        failures.is_empty(),
        "{} golden scenarios differ from their release's allocator:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
