//! Pool ids in snapshots: torch's `segment_pool_id` and its entries' `pool_id` are read (from
//! the pickle and from JSON), written back, and refused with the place and a reason when
//! they are not ids torch makes.

mod common;

use cachalot_core::{MempoolId, TraceAction};
use cachalot_torchfmt::{Snapshot, read_snapshot, to_pickle_bytes};

fn full() -> Snapshot {
    read_snapshot(&common::read(
        &common::fixtures().join("snapshots/pools/mempool-full.pickle.gz"),
    ))
    .unwrap()
}

#[test]
fn torchs_pool_ids_are_read() {
    // scripts/fixtures/gen_pool_snapshots.py: a MemPool (0, 1) with large and small segments, the
    // default pools, and the nested pool (0, 2) and the graph-kind pool (1, 0) given back.
    let snap = full();
    let pools: Vec<MempoolId> = snap.segments.iter().map(|s| s.pool).collect();
    assert!(pools.contains(&MempoolId::DEFAULT));
    assert_eq!(
        pools
            .iter()
            .filter(|p| **p == MempoolId::mempool(1))
            .count(),
        3
    );
    let entries = &snap.device_traces[0].entries;
    assert!(entries.iter().all(|e| e.pool.is_some()));
    for want in [MempoolId::mempool(2), MempoolId::graph(1)] {
        let freed = entries
            .iter()
            .filter(|e| e.action == TraceAction::SegmentFree && e.pool == Some(want))
            .count();
        assert_eq!(freed, 2, "{want}");
    }
    // Written by cachalot and read back: the same ids.
    assert_eq!(read_snapshot(&to_pickle_bytes(&snap)).unwrap(), snap);
}

fn json_with(segment_pool: &str, entry_pool: &str) -> String {
    format!(
        r#"{{"segments": [{{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0,
            "segment_pool_id": {segment_pool},
            "blocks": [{{"size": 2097152, "state": "inactive"}}]}}],
          "device_traces": [[{{"action": "alloc", "addr": 4096, "size": 512, "stream": 0,
            "pool_id": {entry_pool}}}]]}}"#
    )
}

#[test]
fn json_pool_ids_are_read() {
    let snap = read_snapshot(json_with("[0, 7]", "[3, 0]").as_bytes()).unwrap();
    assert_eq!(snap.segments[0].pool, MempoolId::mempool(7));
    assert_eq!(
        snap.device_traces[0].entries[0].pool,
        Some(MempoolId::graph(3))
    );
    let snap = read_snapshot(json_with("null", "null").as_bytes()).unwrap();
    assert_eq!(snap.segments[0].pool, MempoolId::DEFAULT);
    assert_eq!(snap.device_traces[0].entries[0].pool, None);
}

#[test]
fn ids_torch_never_makes_are_refused_with_their_place() {
    for (seg, entry, place, says) in [
        (
            "[3, 4]",
            "[0, 0]",
            "segments[0].segment_pool_id",
            "(3, 4) is not a pool id",
        ),
        (
            "[0, 0]",
            "[1, 2]",
            "device_traces[0][0].pool_id",
            "(1, 2) is not a pool id",
        ),
        (
            "[0, -1]",
            "[0, 0]",
            "segments[0].segment_pool_id",
            "non-negative",
        ),
        (
            "[0, 1, 2]",
            "[0, 0]",
            "segments[0].segment_pool_id",
            "found 3 elements",
        ),
        (
            "[0, 0]",
            "[5]",
            "device_traces[0][0].pool_id",
            "found 1 element",
        ),
        (
            "\"x\"",
            "[0, 0]",
            "segments[0].segment_pool_id",
            "found str",
        ),
        (
            "[0, 0]",
            "[[0], 0]",
            "device_traces[0][0].pool_id",
            "non-negative integers",
        ),
    ] {
        let e = read_snapshot(json_with(seg, entry).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains(place) && e.contains(says), "{seg} {entry}: {e}");
    }
}

#[test]
fn a_pickle_may_share_one_pool_id_tuple() {
    // What Python's pickle.dumps(protocol=4) writes for two entries whose `pool_id` is the
    // same tuple object: the second fetches it from the memo (BINGET 13).
    let hex = "80049596000000000000007d94288c087365676d656e7473945d948c0d6465766963655f74726163\
               6573945d945d94287d94288c06616374696f6e948c05616c6c6f63948c0461646472944d00108c04\
               73697a65944d00028c0673747265616d944b008c07706f6f6c5f6964944b004b018694757d942868\
               078c0e667265655f636f6d706c657465649468094d0010680a4d0002680b4b00680c680d75656175\
               2e";
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let snap = read_snapshot(&bytes).unwrap();
    let pools: Vec<_> = snap.device_traces[0]
        .entries
        .iter()
        .map(|e| e.pool)
        .collect();
    assert_eq!(pools, [Some(MempoolId::mempool(1)); 2]);
}
