//! Small hand-made cases whose expected device calls were read off the oracle (torch 2.15's
//! allocator on the simulated device) with `shared/oracle/oracle --segments`.

use cachalot_core::config::parse_pytorch;
use cachalot_replay::{ReplayOptions, TraceBuilder, replay};
use cachalot_sim::{Op, SimConfig};
use cachalot_trace::RmmReader;

fn trace(csv: &str) -> cachalot_replay::LoadedTrace {
    let mut b = TraceBuilder::new();
    for e in RmmReader::new(csv.as_bytes()) {
        let e = e.unwrap();
        b.push(e.line, e.record);
    }
    b.finish()
}

/// Replays `t` under `conf` on a device of `capacity` bytes; the sizes of its `op` calls.
fn call_sizes(t: &cachalot_replay::LoadedTrace, conf: &str, capacity: u64, op: Op) -> Vec<u64> {
    let opts = ReplayOptions {
        conf: parse_pytorch(conf).unwrap().0,
        sim: SimConfig::with_capacity(capacity),
        log_segments: true,
        ..ReplayOptions::default()
    };
    let r = replay(t, &opts).unwrap();
    r.segments
        .iter()
        .filter(|e| e.op == op)
        .map(|e| e.size)
        .collect()
}

#[test]
fn expandable_segments_reserve_sizes_match_the_oracle() {
    // A 5 MB request (large pool, 20 MiB pages) then a 1000 B one (small pool, 2 MiB pages)
    // on a 10 GiB device: the two reservations' sizes, as the oracle logged them.
    let t = trace(
        "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,5000000,0\n1,0,allocate,0x2,1000,0\n",
    );
    let cases = [
        ("", [12_079_595_520, 12_079_595_520]),
        (
            ",expandable_segments_reserve:0.5",
            [5_368_709_120, 5_368_709_120],
        ),
        (
            ",expandable_segments_reserve:3G",
            [3_229_614_080, 3_221_225_472],
        ),
        (
            ",expandable_segments_reserve:0.001",
            [20_971_520, 12_582_912],
        ),
        (
            ",expandable_segments_reserve:100G",
            [12_079_595_520, 12_079_595_520],
        ),
        (
            ",expandable_segments_reserve:2.0",
            [12_079_595_520, 12_079_595_520],
        ),
    ];
    for (extra, want) in cases {
        let conf = format!("expandable_segments:True{extra}");
        let got = call_sizes(&t, &conf, 10 << 30, Op::AddressReserve);
        assert_eq!(got, want, "expandable_segments_reserve{extra}");
    }
}

#[test]
fn oracle_test_suite_cases() {
    // The oracle's own checks (shared/oracle/tests/run_tests.py), restated: (trace rows,
    // config, capacity, expected cudaMalloc sizes in order).
    let cases: [(&str, &str, u64, &[u64]); 4] = [
        ("1,0,allocate,0x1,1,0", "", 80 << 30, &[2 << 20]),
        ("1,0,allocate,0x1,5242880,0", "", 80 << 30, &[20 << 20]),
        (
            "1,0,allocate,0x1,12582912,0\n1,0,allocate,0x2,11534337,0",
            "",
            80 << 30,
            &[12 << 20, 12 << 20],
        ),
        (
            "1,0,allocate,0x1,5242881,0",
            "roundup_power2_divisions:4",
            80 << 30,
            &[20 << 20],
        ),
    ];
    for (rows, conf, cap, want) in cases {
        let t = trace(&format!("Thread,Time,Action,Pointer,Size,Stream\n{rows}\n"));
        let got = call_sizes(&t, conf, cap, Op::CudaMalloc);
        assert_eq!(got, want, "{rows} under '{conf}'");
    }
}

#[test]
fn direct_backend_ooms_carry_their_own_message() {
    let t = trace(
        "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,3000000,0\n1,0,allocate,0x2,3000000,0\n",
    );
    let opts = ReplayOptions {
        conf: parse_pytorch("backend:cudaMallocAsync").unwrap().0,
        sim: SimConfig::with_capacity(4 << 20),
        ..ReplayOptions::default()
    };
    let r = replay(&t, &opts).unwrap();
    assert_eq!(r.ooms.count, 1);
    let oom = &r.ooms.events[0];
    assert_eq!(oom.line, 3);
    assert!(
        oom.report.is_none(),
        "the caching allocator's numbers do not apply"
    );
    assert!(
        oom.message
            .starts_with("Allocation on device 0 would exceed allowed memory. (out of memory)"),
        "{}",
        oom.message
    );
}
