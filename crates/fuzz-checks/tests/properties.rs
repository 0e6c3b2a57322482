//! Property tests over the whole `u64` range, through every backend: random allocator call
//! sequences (sizes anywhere in `u64`, capacities from 2 MiB to `u64::MAX`) keep the caching
//! allocator's invariants, never hand out overlapping or wrapping ranges, and a call that
//! fails for a reason other than memory leaves the allocator exactly as it was
//! (`cachalot_fuzz_checks::run_ops` checks all three after every call).

use cachalot_fuzz_checks::{CAPACITIES, CONFIGS, Op, conf_at, run_ops};
use proptest::prelude::*;

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..(2 << 20),
        3 => 0u64..(400 << 20),
        1 => 0u64..(1 << 42),
        1 => (0u64..(16 << 20)).prop_map(|d| u64::MAX - d),
        1 => any::<u64>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (size(), 0u8..4).prop_map(|(size, stream)| Op::Malloc { size, stream }),
        4 => (any::<u16>(), prop::bool::weighted(0.1)).prop_map(|(pick, bogus)| Op::Free { pick, bogus }),
        1 => (any::<u16>(), 0u8..4).prop_map(|(pick, stream)| Op::RecordStream { pick, stream }),
        1 => Just(Op::EmptyCache),
        1 => (0u8..=120).prop_map(|percent| Op::SetFraction { percent }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_calls_keep_every_property(
        conf in 0..CONFIGS.len(),
        capacity in prop_oneof![
            3 => proptest::sample::select(CAPACITIES),
            1 => any::<u64>(),
            1 => (2u64 << 20)..(8u64 << 30),
        ],
        ops in prop::collection::vec(op(), 1..120),
    ) {
        run_ops(conf_at(conf), capacity, &ops);
    }
}
