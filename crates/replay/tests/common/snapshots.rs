//! Shared by the snapshot replay tests: reading a fixture snapshot, checking the window a
//! replay rebuilds from it, and cutting its history as a ring buffer would.

#![allow(dead_code)]

use cachalot_replay::diagnose::snapshot_conf;
use cachalot_replay::input::{WindowCheck, check_window, read_snapshot_path, snapshot_input};
use cachalot_torchfmt::{EventOptions, Format, Snapshot};

/// The snapshot at `rel` under `tests/fixtures`.
pub fn read(rel: &str) -> Snapshot {
    read_snapshot_path(&cachalot_testkit::fixtures().join(rel)).unwrap()
}

/// How the replay of `device`'s history, as the program's whole workload, compares with the
/// snapshot's own end state.
pub fn check(snap: &Snapshot, device: u32) -> WindowCheck {
    let input = snapshot_input(snap, device, Format::Pickle, &EventOptions::WORKLOAD).unwrap();
    let (conf, _) = snapshot_conf(snap);
    check_window(&input, &conf).unwrap().unwrap()
}

/// The snapshot with only the last `keep` entries of device 0's history, as a ring buffer of
/// `keep` entries would have it.
pub fn ring(snap: &Snapshot, keep: usize) -> Snapshot {
    let mut s = snap.clone();
    let e = &mut s.device_traces[0].entries;
    let cut = e.len().saturating_sub(keep);
    e.drain(..cut);
    s
}
