//! `tune`/`compare` for an older torch release replay that release's decisions: every
//! candidate of the search, the user's own line, the minimum-capacity search and every row of
//! `compare` are replayed with `Candidate::for_torch(release)`, so a `roundup_power2_divisions`
//! list with `>` (read otherwise up to torch 2.9) gets torch 2.9's numbers under 2.9.

use cachalot_advisor::{
    Candidate, CompareOptions, CostModel, TuneOptions, compare, measure::measure, min_capacity,
    min_capacity_of, tune,
};
use cachalot_core::config::TorchVersion;
use cachalot_replay::LoadedTrace;

const LIST: &str = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]";
const GIB: u64 = 1 << 30;

fn v(s: &str) -> TorchVersion {
    s.parse().unwrap()
}

/// Requests of 1.1 GiB and 1.2 GiB, one after the other, twice: with 4 divisions between 1
/// and 2 GiB (2.15's reading of [`LIST`]) both round to 1.25 GiB and share one segment; with
/// 8 (torch 2.9's, where `>` overwrites the 1024 entry) they round to 1.125 and 1.25 GiB.
fn trace() -> LoadedTrace {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let sizes = [GIB + GIB / 10, GIB + GIB / 5];
    for (i, size) in sizes.iter().chain(&sizes).enumerate() {
        csv.push_str(&format!("1,{},allocate,{:#x},{size},0\n", 2 * i, i + 1));
        csv.push_str(&format!("1,{},free,{:#x},{size},0\n", 2 * i + 1, i + 1));
    }
    cachalot_replay::load_bytes(csv.as_bytes()).unwrap()
}

fn at(capacity: u64, release: TorchVersion) -> TuneOptions<'static> {
    TuneOptions {
        threads: Some(1),
        top: 64,
        release,
        ..TuneOptions::at(capacity)
    }
}

#[test]
fn the_list_is_read_and_replayed_as_each_release_does() {
    let t = trace();
    let cost = CostModel::default();
    let list = Candidate::parse(LIST).unwrap();
    let newest = measure(&t, &list, 8 * GIB, &cost).unwrap();
    let old = measure(&t, &list.clone().for_torch(v("2.9")), 8 * GIB, &cost).unwrap();
    assert_eq!(newest.peak_reserved, 1280 << 20, "{newest:?}");
    assert!(old.peak_reserved > newest.peak_reserved, "{old:?}");
    // 2.10 reads the list as 2.15 does
    let ten = measure(&t, &list.clone().for_torch(v("2.10")), 8 * GIB, &cost).unwrap();
    assert_eq!(ten, newest);
}

#[test]
fn tune_for_2_9_replays_2_9s_decisions() {
    let t = trace();
    let cost = CostModel::default();
    let mut owns = Vec::new();
    for release in [v("2.9"), TorchVersion::NEWEST] {
        let r = tune(
            &t,
            &TuneOptions {
                own: Some(Candidate::parse(LIST).unwrap()),
                ..at(8 * GIB, release)
            },
        )
        .unwrap();
        let own = r.own.as_ref().expect("the own line is ranked");
        let expect = measure(
            &t,
            &Candidate::parse(LIST).unwrap().for_torch(release),
            8 * GIB,
            &cost,
        )
        .unwrap();
        assert_eq!(own.metrics, expect, "torch {release}");
        // every replay the search made is the release's: the numbers of every entry are
        // those of a plain replay of its line with that release's decisions
        let entries = r.ranking.iter().chain([&r.default]).chain(&r.advice);
        for e in entries {
            assert_eq!(e.candidate.conf.torch, release, "{}", e.candidate.label);
            let again = Candidate::parse(&e.candidate.label)
                .unwrap()
                .for_torch(release);
            assert_eq!(
                measure(&t, &again, 8 * GIB, &cost).unwrap(),
                e.metrics,
                "torch {release}: {}",
                e.candidate.label
            );
        }
        owns.push(own.metrics.clone());
    }
    // the user's list replays otherwise on 2.9 than on 2.15
    assert!(owns[0].peak_reserved > owns[1].peak_reserved, "{owns:?}");
}

#[test]
fn min_capacity_and_compare_for_2_9_replay_2_9s_decisions() {
    let t = trace();
    let release = v("2.9");
    let m = min_capacity(&t, &at(0, release)).unwrap();
    for b in m.best.iter().chain(&m.seeds) {
        assert_eq!(b.candidate.conf.torch, release, "{}", b.candidate.label);
        let again = Candidate::parse(&b.candidate.label)
            .unwrap()
            .for_torch(release);
        assert_eq!(
            min_capacity_of(&t, &again.conf).unwrap(),
            b.capacity,
            "{}",
            b.candidate.label
        );
    }
    let tuned = m.tune.expect("it fits somewhere");
    assert!(
        tuned
            .ranking
            .iter()
            .all(|e| e.candidate.conf.torch == release)
    );

    let rows = |release| {
        compare(
            &t,
            &[LIST.to_string()],
            &CompareOptions {
                capacity: 8 * GIB,
                cost: CostModel::default(),
                threads: Some(1),
                min_capacity: true,
                progress: None,
                own: None,
                release,
            },
        )
        .unwrap()
        .rows
    };
    let (old, newest) = (rows(release), rows(TorchVersion::NEWEST));
    assert_eq!(old[1].candidate.label, LIST);
    assert!(old[1].metrics.peak_reserved > newest[1].metrics.peak_reserved);
    let list_as_2_9 = Candidate::parse(LIST).unwrap().for_torch(release);
    assert_eq!(
        old[1].min_capacity,
        min_capacity_of(&t, &list_as_2_9.conf).unwrap()
    );
    // the default reads alike on both
    assert_eq!(old[0].metrics, newest[0].metrics);
}
