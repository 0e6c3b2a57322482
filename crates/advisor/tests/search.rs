//! The search: deterministic whatever the thread count, consistent with plain replays, and
//! the HTML report's structure.

use std::path::PathBuf;

use cachalot_advisor::{
    Candidate, CompareOptions, CostModel, STEP, TuneOptions, compare, fits, html, min_capacity,
    min_capacity_of, record_timelines, text, tune,
};
use cachalot_replay::LoadedTrace;

fn trace(name: &str) -> LoadedTrace {
    let p: PathBuf = cachalot_testkit::fixture("traces").join(format!("{name}.csv.gz"));
    cachalot_replay::load_path(&p).unwrap()
}

fn summary(r: &cachalot_advisor::TuneResult) -> Vec<(String, cachalot_advisor::Metrics)> {
    r.ranking
        .iter()
        .chain(std::iter::once(&r.default))
        .chain(&r.advice)
        .map(|e| (e.candidate.label.clone(), e.metrics.clone()))
        .collect()
}

#[test]
fn tune_is_the_same_on_one_thread_and_on_four() {
    // resnet50-train at its tight capacity (5632 MiB): the default retries 7 times.
    let t = trace("resnet50-train");
    let one = tune(
        &t,
        &TuneOptions {
            threads: Some(1),
            ..TuneOptions::at(5632 << 20)
        },
    )
    .unwrap();
    let four = tune(
        &t,
        &TuneOptions {
            threads: Some(4),
            ..TuneOptions::at(5632 << 20)
        },
    )
    .unwrap();
    assert_eq!(summary(&one), summary(&four));
    assert_eq!(one.searched, four.searched);
    assert_eq!(one.winner().candidate.label, "expandable_segments:True");
    assert_eq!(one.winner().metrics.retries, 0);
    assert_eq!(one.default.metrics.retries, 7);
    // The ranking is sorted, with distinct results.
    for w in one.ranking.windows(2) {
        assert!(w[0].order(&w[1]).is_lt());
        assert_ne!(w[0].metrics.key(), w[1].metrics.key());
    }
}

#[test]
fn numbers_equal_a_plain_replay() {
    let t = trace("gpt2-train");
    let r = tune(&t, &TuneOptions::at(17216 << 20)).unwrap();
    let w = r.winner();
    let opts = cachalot_replay::ReplayOptions {
        conf: w.candidate.conf.clone(),
        sim: cachalot_sim::SimConfig::with_capacity(17216 << 20),
        ..Default::default()
    };
    let plain = cachalot_replay::replay(&t, &opts).unwrap();
    assert_eq!(w.metrics.retries, plain.stats.num_alloc_retries as u64);
    assert_eq!(w.metrics.ooms, plain.ooms.count);
    assert_eq!(
        w.metrics.peak_reserved,
        plain.stats.reserved_bytes.all().peak as u64
    );
    assert_eq!(w.metrics.device_allocs, plain.stats.num_device_alloc as u64);
}

#[test]
fn min_capacity_is_a_verified_boundary() {
    let t = trace("gpt2-train");
    let default = Candidate::parse("").unwrap();
    // The golden "tight" capacity of gpt2-train: 17216 MiB.
    let c = min_capacity_of(&t, &default.conf).unwrap().unwrap();
    assert_eq!(c, 17216 << 20);
    assert!(fits(&t, &default.conf, c).unwrap());
    assert!(!fits(&t, &default.conf, c - STEP).unwrap());

    let r = min_capacity(&t, &TuneOptions::at(0)).unwrap();
    let best = r.capacity.unwrap();
    let with = r.fits_with.as_ref().unwrap();
    assert!(best < c, "some configuration needs less than the default");
    assert!(fits(&t, &with.candidate.conf, best).unwrap());
    assert!(!fits(&t, &with.candidate.conf, best - STEP).unwrap());
    let at = r.tune.as_ref().unwrap();
    assert_eq!(at.capacity, best);
    assert_eq!(at.winner().metrics.ooms, 0);
    assert!(at.default.metrics.ooms > 0);
}

#[test]
fn compare_rows_and_html_structure() {
    let t = trace("gpt2-train");
    let confs = vec![
        "max_split_size_mb:128".to_string(),
        "expandable_segments:True".to_string(),
    ];
    let opts = CompareOptions {
        capacity: 17216 << 20,
        cost: CostModel::default(),
        threads: None,
        min_capacity: true,
        progress: None,
        own: None,
        release: cachalot_core::config::TorchVersion::NEWEST,
    };
    let r = compare(&t, &confs, &opts).unwrap();
    let labels: Vec<&str> = r.rows.iter().map(|x| x.candidate.label.as_str()).collect();
    assert_eq!(
        labels,
        ["", "max_split_size_mb:128", "expandable_segments:True"]
    );
    // The golden results of torch 2.15 at this capacity: default 1 retry, max-split-128 4.
    assert_eq!(r.rows[0].metrics.retries, 1);
    assert_eq!(r.rows[1].metrics.retries, 4);
    assert_eq!(r.rows[2].metrics.retries, 0);
    assert_eq!(r.rows[0].min_capacity, Some(17216 << 20));

    let cands: Vec<Candidate> = r.rows.iter().map(|x| x.candidate.clone()).collect();
    let tl = record_timelines(&t, &cands, opts.capacity, &opts.cost, None).unwrap();
    for (row, tl) in r.rows.iter().zip(&tl) {
        assert_eq!(
            row.metrics, tl.metrics,
            "a timeline replay gives the same numbers"
        );
    }
    assert_eq!(tl[0].retries.len(), 1);
    let page = html::compare_page(&r, &text::Source::trace("gpt2-train", t.ops.len()), &tl);
    check_page(&page, &labels, 3);

    let tuned = tune(&t, &TuneOptions::at(17216 << 20)).unwrap();
    let page = html::tune_page(&tuned, &text::Source::trace("gpt2-train", t.ops.len()), &tl);
    let doc_rows = tuned.ranking.len()
        + [&tuned.default]
            .into_iter()
            .chain(&tuned.advice)
            .filter(|e| {
                !tuned
                    .ranking
                    .iter()
                    .any(|x| x.candidate.label == e.candidate.label)
            })
            .count();
    check_page(&page, &labels, doc_rows);
    assert!(page.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
}

/// Parses the page as XML and checks: a table row per configuration, a section per timeline
/// with its allocated, reserved and device-allocation series, a retry mark where the default
/// retries, and nothing that loads from elsewhere.
fn check_page(page: &str, sections: &[&str], rows: usize) {
    let body = page.trim_start_matches("<!DOCTYPE html>");
    let doc = roxmltree::Document::parse(body).expect("the page is well-formed");
    let class_has = |n: &roxmltree::Node, c: &str| {
        n.attribute("class")
            .is_some_and(|v| v.split_whitespace().any(|x| x == c))
    };
    let trs: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("tr") && class_has(n, "row"))
        .collect();
    assert_eq!(trs.len(), rows);
    let secs: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("section") && class_has(n, "timeline"))
        .collect();
    let got: Vec<&str> = secs
        .iter()
        .map(|s| s.attribute("data-config").unwrap())
        .collect();
    assert_eq!(got, sections);
    for s in &secs {
        for series in ["allocated", "reserved", "held"] {
            let p = s
                .descendants()
                .find(|n| n.has_tag_name("path") && class_has(n, series))
                .unwrap_or_else(|| panic!("no {series} series"));
            let d = p.attribute("d").unwrap();
            assert!(
                d.starts_with('M') && d.matches(" L").count() > 100,
                "{series}"
            );
        }
    }
    let retries = secs[0]
        .descendants()
        .filter(|n| n.has_tag_name("line") && class_has(n, "retry"))
        .count();
    assert_eq!(retries, 1, "the default retries once at this capacity");
    for n in doc.descendants() {
        assert!(!n.has_tag_name("script") && !n.has_tag_name("img") && !n.has_tag_name("link"));
        for a in n.attributes() {
            assert!(
                !a.value().contains("://"),
                "external reference {}",
                a.value()
            );
        }
    }
    assert!(!page.contains("http://") && !page.contains("https://"));
}
