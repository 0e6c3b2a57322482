//! `cachalot bench` end to end, on tiny generated traces (the speed itself is measured by
//! running it, not asserted here).

use cachalot_testkit::workspace;

#[test]
fn bench_prints_one_row_per_trace_and_configuration() {
    let out = cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot"))
        .current_dir(workspace())
        .args(["bench", "--runs", "3", "--scale", "0.01", "--no-oracle"])
        .args([
            "--trace",
            "streams-64",
            "--trace",
            "live-5k",
            "--trace",
            "random-4streams",
        ])
        .args([
            "--config",
            "default",
            "--config",
            "expandable_segments:True",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("streams-64")
                || l.starts_with("live-5k")
                || l.starts_with("random-4streams")
        })
        .collect();
    assert_eq!(rows.len(), 6, "{text}");
    for row in rows {
        // trace, config, reps, events, min ns, torch, ratio, median ns, "/", torch median, ...
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
    let out = cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot"))
        .current_dir(workspace())
        .args([
            "bench",
            "--runs",
            "1",
            "--no-oracle",
            "--trace",
            "random-4streams",
        ])
        .args(["--config", "default", "--min-events", "250000"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("random-4streams"))
        .expect("a row");
    let cols: Vec<&str> = row.split_whitespace().collect();
    // 100,000 events: three copies reach 250,000.
    assert_eq!((cols[2], cols[3]), ("3", "300000"), "{row}");
}

#[test]
fn bench_against_the_oracle_reports_the_same_decisions() {
    let oracle = match cachalot_testkit::oracle() {
        Ok(oracle) => oracle,
        Err(why) => return cachalot_testkit::skip(why),
    };
    let out = cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot"))
        .current_dir(workspace())
        .args([
            "bench",
            "--runs",
            "1",
            "--scale",
            "0.01",
            "--trace",
            "streams-64",
        ])
        // 4,000 events at this scale, 10,000 wanted: torch and cachalot replay three copies.
        .args([
            "--config",
            "max_split_size_mb:128",
            "--min-events",
            "1000000",
        ])
        .arg("--oracle")
        .arg(&oracle)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("streams-64"))
        .expect("a row");
    assert!(row.trim_end().ends_with("yes"), "{row}");
    assert_eq!(row.split_whitespace().nth(2), Some("3"), "{row}");
}

#[test]
fn bench_rejects_an_unknown_configuration_label() {
    let out = cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot"))
        .args(["bench", "--no-oracle", "--config", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'nonsense'") && err.contains("the labels are"),
        "{err}"
    );
}
