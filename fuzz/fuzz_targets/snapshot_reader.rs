//! Fuzzes the snapshot readers: any input gives a snapshot or an error, never a panic, and a
//! snapshot that reads writes back to a pickle that reads as the same snapshot.
//!
//! ```text
//! cargo +nightly fuzz run snapshot_reader -- -max_len=65536
//! ```
//! Seeds: the pickles and JSON snapshots of tests/fixtures (gunzipped).

#![no_main]

use cachalot_torchfmt::{read_snapshot, replay_events, to_pickle_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut snap) = read_snapshot(data) else {
        return;
    };
    for device in 0..snap.device_traces.len() as u32 {
        let _ = replay_events(&snap, device);
    }
    // Actions the writer does not know are not written back.
    for t in &mut snap.device_traces {
        t.skipped.clear();
    }
    let again = read_snapshot(&to_pickle_bytes(&snap)).expect("our own pickle reads");
    assert_eq!(again, snap);
});
