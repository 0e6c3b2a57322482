//! `cachalot-bench` end to end, on tiny generated traces (the speed itself is measured by
//! running it, not asserted here).

use cachalot_testkit::{stdout_of, workspace};

/// The output of `cachalot-bench ARGS`, run from the workspace; panics unless it succeeds.
fn bench(args: &[&str]) -> String {
    stdout_of(
        cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot-bench"))
            .current_dir(workspace())
            .args(args),
    )
}

/// The row of `trace` in `text`, split into columns: trace, config, reps, events, min ns,
/// torch, ratio, median ns, "/", torch median, …
fn columns<'t>(text: &'t str, trace: &str) -> Vec<&'t str> {
    let row = text
        .lines()
        .find(|l| l.starts_with(trace))
        .unwrap_or_else(|| panic!("no row for {trace}:\n{text}"));
    row.split_whitespace().collect()
}

#[test]
fn bench_prints_one_row_per_trace_and_configuration() {
    let traces = ["streams-64", "live-5k", "random-4streams"];
    let text = bench(&[
        "--runs",
        "3",
        "--scale",
        "0.01",
        "--no-oracle",
        "--trace",
        traces[0],
        "--trace",
        traces[1],
        "--trace",
        traces[2],
        "--config",
        "default",
        "--config",
        "expandable_segments:True",
    ]);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| traces.iter().any(|t| l.starts_with(t)))
        .collect();
    assert_eq!(rows.len(), 6, "{text}");
    for row in rows {
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[2], "1", "scaled down, nothing is repeated: {row}");
        let ns: f64 = cols[4].parse().unwrap();
        let median: f64 = cols[7].parse().unwrap();
        assert!(ns > 0.0 && median >= ns, "{row}");
    }
}

/// A trace shorter than `--min-events` is replayed as several copies in one run: the row
/// counts the events of all of them.
#[test]
fn bench_repeats_a_short_trace_up_to_min_events() {
    let text = bench(&[
        "--runs",
        "1",
        "--no-oracle",
        "--trace",
        "random-4streams",
        "--config",
        "default",
        "--min-events",
        "250000",
    ]);
    let cols = columns(&text, "random-4streams");
    // 100,000 events: three copies reach 250,000.
    assert_eq!((cols[2], cols[3]), ("3", "300000"), "{cols:?}");
}

#[test]
fn bench_against_the_oracle_reports_the_same_decisions() {
    let oracle = match cachalot_testkit::oracle() {
        Ok(oracle) => oracle,
        Err(why) => return cachalot_testkit::skip(why),
    };
    let oracle = oracle.to_string_lossy();
    // 4,000 events at this scale, 10,000 wanted: torch and cachalot replay three copies.
    let text = bench(&[
        "--runs",
        "1",
        "--scale",
        "0.01",
        "--trace",
        "streams-64",
        "--config",
        "max_split_size_mb:128",
        "--min-events",
        "1000000",
        "--oracle",
        &oracle,
    ]);
    let cols = columns(&text, "streams-64");
    assert_eq!(cols.last(), Some(&"yes"), "{cols:?}");
    assert_eq!(cols[2], "3", "{cols:?}");
}

#[test]
fn bench_rejects_an_unknown_configuration_label() {
    let out = cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot-bench"))
        .args(["--no-oracle", "--config", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'nonsense'") && err.contains("the labels are"),
        "{err}"
    );
}
