//! Malformed or hostile snapshots get an error, never a panic, and never memory out of
//! proportion to their size: truncated pickles, wrong types, deep nesting, shared and
//! recursive structures, huge lengths, random bytes.

mod common;

use cachalot_torchfmt::{SnapshotError, read_snapshot};
use proptest::prelude::*;

/// A small valid snapshot pickle (one of torch's, cut down by our writer).
fn small_valid() -> Vec<u8> {
    static CACHE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    CACHE.get_or_init(build_small_valid).clone()
}

fn build_small_valid() -> Vec<u8> {
    let full = read_snapshot(&common::read(
        &common::fixtures().join("pickle/resnet50-train.oom-5G.pickle.gz"),
    ))
    .unwrap();
    let mut s = full.clone();
    s.segments.truncate(3);
    s.device_traces[0].entries.truncate(40);
    cachalot_torchfmt::to_pickle_bytes(&s)
}

fn err(data: &[u8]) -> String {
    match read_snapshot(data) {
        Ok(_) => panic!("accepted {} bytes", data.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_truncation_is_an_error() {
    let data = small_valid();
    assert!(read_snapshot(&data).is_ok());
    for n in 0..data.len() {
        let _ = err(&data[..n]);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let n = 1_000_000;
    // [[[[...]]]]: a million nested lists.
    let mut p = vec![0x80, 4];
    p.extend(std::iter::repeat_n(b']', n));
    p.extend(std::iter::repeat_n(b'a', n - 1));
    p.push(b'.');
    assert!(err(&p).contains("segments"), "{}", err(&p));
    // {"segments": {"segments": ...}} a million deep.
    let mut p = vec![0x80, 4];
    for _ in 0..n {
        p.extend(b"}\x8c\x08segments");
    }
    p.push(b'}');
    p.extend(std::iter::repeat_n(b's', n));
    p.push(b'.');
    let e = err(&p);
    assert!(e.contains("expected a list, found dict"), "{e}");
    // JSON: what nothing reads is skipped without recursion, to the end of the input.
    let json = "[".repeat(100_000);
    let e = err(json.as_bytes());
    assert!(e.contains("EOF while parsing"), "{e}");
    let json = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let e = err(json.as_bytes());
    assert!(
        e.contains("segments[0]: expected a dict, found list"),
        "{e}"
    );
}

#[test]
fn shared_and_recursive_structures_are_refused_not_expanded() {
    // A "billion laughs": l0 = [0]; l(k+1) = [lk, lk]; 60 levels would be 2^60 elements if
    // memo references were copied. Used as the segments list.
    let mut p = vec![0x80, 4, b'}', b'\x8c', 8];
    p.extend(b"segments");
    p.extend(b"]K\x00a\x940"); // l0 into memo 0, popped
    for k in 0..60u8 {
        // l(k+1) = [lk, lk] into memo k+1, popped.
        p.extend([b']', b'(', b'h', k, b'h', k, b'e', 0x94, b'0']);
    }
    p.extend([b'h', 60, b's', b'.']);
    let e = err(&p);
    assert!(
        e.contains("segments[0]: expected a dict, found list"),
        "{e}"
    );
    // One valid segment dict referred to twice by the memo.
    let seg = br#"{"segments": [{"device": 0, "address": 4096, "total_size": 512, "stream": 0, "blocks": [{"size": 512, "state": "inactive"}]}]}"#;
    let one = read_snapshot(seg).unwrap();
    let mut p = b"\x80\x04}\x8c\x08segments](".to_vec();
    p.extend(b"}\x94(\x8c\x06deviceK\x00\x8c\x07addressM\x00\x10\x8c\ntotal_sizeM\x00\x02");
    p.extend(b"\x8c\x06streamK\x00\x8c\x06blocks]}(\x8c\x04sizeM\x00\x02\x8c\x05state");
    p.extend(b"\x8c\x08inactiveuau");
    let mut single = p.clone();
    single.extend(b"es.");
    assert_eq!(read_snapshot(&single).unwrap(), one);
    p.extend(b"h\x00es.");
    let e = err(&p);
    assert!(
        e.contains("segments[1]: the same container appears twice"),
        "{e}"
    );
    // A list inside itself, as the device traces.
    let p = b"\x80\x04}(\x8c\x08segments]\x8c\rdevice_traces]\x94h\x00au.";
    let e = err(p);
    assert!(
        e.contains("device_traces[0]: the same container appears twice"),
        "{e}"
    );
}

#[test]
fn huge_lengths_are_checked_before_anything_is_allocated() {
    for p in [
        &b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xffab"[..],
        b"\x80\x04X\xff\xff\xff\xffab",
        b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f}.",
        b"\x80\x04\x8a\xff\x01\x02",
    ] {
        let e = err(p);
        assert!(e.contains("truncated") || e.contains("past the end"), "{e}");
    }
    let mut long1 = b"\x80\x04\x8a\x20".to_vec();
    long1.extend([1u8; 32]);
    long1.push(b'.');
    assert!(err(&long1).contains("integer of 32 bytes is too large"));
}

#[test]
fn wrong_types_say_where_and_what() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"segments": 3}"#,
            "snapshot field segments: expected a list, found int 3",
        ),
        (
            r#"{"segments": [{"device": 0, "address": 1, "total_size": 512, "stream": 0, "blocks": [{"size": "big", "state": "inactive"}]}]}"#,
            "snapshot field segments[0].blocks[0].size: expected an integer, found str \"big\"",
        ),
        (
            r#"{"segments": [{"device": 0, "address": 1, "total_size": 512, "stream": 0, "blocks": [{"size": 512, "state": "lost"}]}]}"#,
            "unknown block state 'lost'",
        ),
        (
            r#"{"segments": [], "device_traces": [[{"action": "alloc", "addr": -5, "size": 1, "stream": 0}]]}"#,
            "device_traces[0][0].addr: -5 is out of range",
        ),
        (r#"{"segment": []}"#, "missing key 'segments'"),
        (r#""just a string""#, "not a torch memory snapshot"),
        (
            "Thread,Time,Action",
            "not a torch memory snapshot: starts with \"Thread,Time,Act",
        ),
    ];
    for (input, want) in cases {
        let e = err(input.as_bytes());
        assert!(e.contains(want), "{input}: {e}");
    }
    let e = err(b"\x80\x04cposix\nsystem\n.");
    assert!(e.contains("GLOBAL (0x63) is not read here"), "{e}");
    assert!(matches!(
        read_snapshot(b"\x80\x01}."),
        Err(SnapshotError::Pickle(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = read_snapshot(&data);
        let mut p = vec![0x80, 4];
        p.extend(&data);
        let _ = read_snapshot(&p);
    }

    #[test]
    fn mutated_snapshots_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut data = small_valid();
        for (at, byte) in flips {
            let i = at.index(data.len());
            data[i] = byte;
        }
        let _ = read_snapshot(&data);
        let n = cut.index(data.len());
        let _ = read_snapshot(&data[..n]);
    }

    #[test]
    fn mutated_json_never_panics(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut data = br#"{"segments": [{"device": 0, "address": 4096, "total_size": 1024, "stream": 0, "segment_type": "small", "blocks": [{"size": 512, "state": "active_allocated", "requested_size": 500}, {"size": 512, "state": "inactive"}]}], "device_traces": [[{"action": "alloc", "addr": 4096, "size": 500, "stream": 0, "time_us": 1}, {"action": "oom", "device_free": 0, "size": 2097152, "stream": 0}]]}"#.to_vec();
        for (at, byte) in flips {
            let i = at.index(data.len());
            data[i] = byte;
        }
        let _ = read_snapshot(&data);
    }
}
