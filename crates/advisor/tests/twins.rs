//! Twins ([`cachalot_advisor::space::Twins`]): every configuration the search gives a twin's
//! numbers replays, in full, to exactly those numbers.

mod common;

use std::collections::HashMap;

use cachalot_advisor::measure::measure;
use cachalot_advisor::space::{DIMS, Twins};
use cachalot_advisor::{Candidate, CostModel, Metrics, SearchSpace, Settings};
use cachalot_replay::LoadedTrace;

/// The points of the space the test groups: every option alone, and one move away from
/// each of those (which covers the pairs the search combines).
fn points(space: &SearchSpace) -> Vec<Settings> {
    let mut v = space.singles();
    for s in space.singles() {
        v.extend(space.neighbours(&s));
    }
    for dim in DIMS {
        for s in space.values(dim, &Settings::ADVICE_EXPANDABLE) {
            v.extend(space.neighbours(&s));
        }
    }
    cachalot_advisor::space::dedup(v)
}

/// Replays every member of every class with more than one member; returns how many members
/// were compared with their class's first.
fn check(name: &str, trace: &LoadedTrace, capacity: u64) -> usize {
    let space = SearchSpace::for_trace(trace);
    let twins = Twins::new(trace, &space, capacity).unwrap();
    let mut classes: HashMap<Settings, Vec<Settings>> = HashMap::new();
    for s in points(&space) {
        classes.entry(twins.class_of(&s)).or_default().push(s);
    }
    let cost = CostModel::default();
    let run = |s: &Settings| -> Metrics {
        measure(
            trace,
            &Candidate::from_settings(*s).unwrap(),
            capacity,
            &cost,
        )
        .unwrap()
    };
    let mut compared = 0;
    for members in classes.values().filter(|m| m.len() > 1) {
        let first = run(&members[0]);
        for s in &members[1..] {
            assert_eq!(
                run(s),
                first,
                "{name} at {capacity}: '{s}' is not a twin of '{}'",
                members[0]
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn twins_replay_alike_on_the_advisor_fixtures() {
    let mut compared = 0;
    for (name, t, capacity) in common::fixture_traces() {
        // At the fixture's tight capacity, and on a device too small for the larger segments
        // (those requests can never get one, so the rule ignores them).
        compared += check(&name, &t, capacity);
        compared += check(&name, &t, capacity / 4);
    }
    assert!(compared > 50, "only {compared} twins compared");
}

/// A trace whose segments straddle 64 MiB: 62 MiB and 64 MiB requests, then one larger
/// than any device here.
fn straddling(last: u64) -> LoadedTrace {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let sizes = [62u64 << 20, 64 << 20, 1 << 20, 30 << 20, last];
    let mut t = 0;
    for round in 0..20u64 {
        for (i, &size) in sizes.iter().enumerate() {
            let ptr = 0x1000 + round * 16 + i as u64;
            csv.push_str(&format!("1,{t},allocate,{ptr:#x},{size},0\n"));
            t += 1;
            if !(round + i as u64).is_multiple_of(3) {
                csv.push_str(&format!("1,{t},free,{ptr:#x},{size},0\n"));
                t += 1;
            }
        }
    }
    cachalot_replay::load_bytes(csv.as_bytes()).unwrap()
}

#[test]
fn the_split_rule_keeps_a_setting_that_a_segment_reaches() {
    let t = straddling(100 << 30);
    let space = SearchSpace::for_trace(&t);
    let cap = 4u64 << 30;
    let twins = Twins::new(&t, &space, cap).unwrap();
    let ms = |m| Settings {
        max_split_mb: Some(m),
        ..Settings::DEFAULT
    };
    // 64 MiB segments exist: max_split_size_mb:64 acts; 128 and above cannot (the 100 GiB
    // request never gets a segment on a 4 GiB device).
    assert_eq!(twins.class_of(&ms(64)), ms(64));
    assert_eq!(twins.class_of(&ms(128)), Settings::DEFAULT);
    let exp = Settings {
        expandable: true,
        ..ms(128)
    };
    assert_eq!(
        twins.class_of(&exp),
        exp,
        "expandable blocks grow past segments"
    );
    // On a device where the large request fits, its segment makes every size act.
    let big = Twins::new(&t, &space, 200 << 30).unwrap();
    assert_eq!(big.class_of(&ms(8192)), ms(8192));
    assert!(check("straddling", &t, cap) > 0);
    assert!(check("straddling-small-last", &straddling(3 << 20), cap) > 0);
}
