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
        // trace, config, events, min ns, torch, ratio, median ns, "/", torch median, ...
        let cols: Vec<&str> = row.split_whitespace().collect();
        let ns: f64 = cols[3].parse().unwrap();
        let median: f64 = cols[6].parse().unwrap();
        assert!(ns > 0.0 && median >= ns, "{row}");
    }
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
        .args(["--config", "max_split_size_mb:128"])
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
