//! Configurations that differ only in their garbage collection threshold and memory fraction:
//! whenever the facts of one's replay ([`cachalot_core::bounds::LimitFacts::alike`]) say the
//! other replays alike, a full replay of the other gives exactly the same numbers. Checked on
//! the advisor's fixture traces at their tight capacity (where the limit refuses and garbage
//! collection frees), below it and well above it (where neither acts).

mod common;

use cachalot_advisor::measure::measure;
use cachalot_advisor::space::GC_CHOICES;
use cachalot_advisor::{Candidate, CostModel, Metrics, Roundup, Settings};
use cachalot_replay::LoadedTrace;

/// Every member of the families of a few points: no garbage collection, then each choice.
fn families() -> Vec<Vec<Settings>> {
    let bases = [
        Settings::DEFAULT,
        Settings::ADVICE_EXPANDABLE,
        Settings {
            roundup: Roundup::Single(4),
            max_split_mb: Some(256),
            ..Settings::DEFAULT
        },
    ];
    bases
        .iter()
        .map(|b| {
            std::iter::once(None)
                .chain((0..GC_CHOICES.len()).map(Some))
                .map(|gc| Settings { gc, ..*b })
                .collect()
        })
        .collect()
}

/// Returns (pairs proven alike, pairs whose replays differ).
fn check(name: &str, trace: &LoadedTrace, capacity: u64) -> (usize, usize) {
    let cost = CostModel::default();
    let (mut proven, mut differ) = (0, 0);
    for family in families() {
        let runs: Vec<(Candidate, Metrics)> = family
            .iter()
            .map(|s| {
                let c = Candidate::from_settings(*s).unwrap();
                let m = measure(trace, &c, capacity, &cost).unwrap();
                (c, m)
            })
            .collect();
        for (a, ma) in &runs {
            for (b, mb) in &runs {
                if a.label == b.label {
                    continue;
                }
                let facts = ma.limits.expect("the caching allocator reports its limits");
                if facts.alike(&a.conf, &b.conf) {
                    assert_eq!(
                        mb, ma,
                        "{name} at {capacity}: '{}' is said to replay as '{}'",
                        b.label, a.label
                    );
                    proven += 1;
                } else if mb != ma {
                    differ += 1;
                }
            }
        }
    }
    (proven, differ)
}

#[test]
fn limit_twins_replay_alike_on_the_advisor_fixtures() {
    let (mut proven, mut differ) = (0, 0);
    for (name, t, capacity) in common::fixture_traces() {
        for c in [capacity, capacity / 2, capacity * 4] {
            let (p, d) = check(&name, &t, c);
            proven += p;
            differ += d;
        }
    }
    // Both kinds occur: where the limit or the collector acts, and where neither does.
    assert!(proven > 50, "only {proven} pairs proven alike");
    assert!(differ > 50, "only {differ} pairs that replay differently");
}
