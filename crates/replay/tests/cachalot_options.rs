//! cachalot's opt-in fixes (`CACHALOT_ALLOC_CONF`): what they change on real traces, and that
//! without them the replay is torch's.

use cachalot_core::config::{apply_cachalot, parse_pytorch};
use cachalot_replay::{ReplayOptions, load_rmm, replay};

const GIB: i64 = 1 << 30;

#[test]
fn expandable_oversize_exempt_stops_unbounded_growth_on_random_4streams() {
    let trace = load_rmm(&cachalot_testkit::fixture("traces/random-4streams.csv.gz")).unwrap();
    let (torch_conf, _) = parse_pytorch("expandable_segments:True,max_split_size_mb:64").unwrap();
    let mut fixed_conf = torch_conf.clone();
    apply_cachalot(&mut fixed_conf, "expandable_oversize_exempt:True").unwrap();

    let run = |conf| {
        replay(
            &trace,
            &ReplayOptions {
                conf,
                ..ReplayOptions::default()
            },
        )
        .unwrap()
        .stats
    };
    let torch = run(torch_conf);
    let fixed = run(fixed_conf);
    // torch 2.15 (golden scenario expandable-max-split-64): reserved grows to ~80 GiB to hold
    // under 5 GiB, because free expandable blocks are refused as "oversize".
    assert_eq!(torch.reserved_bytes.all().peak, 85_880_471_552);
    assert!(
        fixed.reserved_bytes.all().peak < 8 * GIB,
        "{}",
        fixed.reserved_bytes.all().peak
    );
    assert_eq!(
        fixed.allocated_bytes.all().peak,
        torch.allocated_bytes.all().peak
    );
    assert!(fixed.num_device_alloc < torch.num_device_alloc / 10);
    assert_eq!((fixed.num_ooms, torch.num_ooms), (0, 0));
}
