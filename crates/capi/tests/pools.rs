//! Builds `tests/c/pools.c` against the library and runs it on the simulated device: a
//! MemPool's life (its segment is kept by `empty_cache` while referenced, freed by `del pool`),
//! a pool that takes one stream only, and misuse reported with torch's message. Skipped (with
//! the reason printed) without gcc.

mod common;

#[test]
fn pools_through_the_c_library() {
    let Some(printed) = common::run_c_program("pools.c", &[]) else {
        return;
    };
    let stdout = &printed.stdout;
    let got = printed.keys();
    let mib20 = (20u64 << 20).to_string();
    for (key, want) in [
        ("create", "0"),
        ("begin", "0"),
        ("end", "0"),
        ("release_exit", "0"),
        ("count_after_with", "1"),
        ("outside_reuses_pool_block", "0"),
        ("reserved_before_empty", &(40u64 << 20).to_string()[..]),
        ("reserved_after_empty", &mib20[..]),
        ("release_del", "0"),
        ("empty_pool", "0"),
        ("reserved_after_del", "0"),
        ("count_after_del", "-1"),
        ("graph_begin", "0"),
        ("graph_end", "0"),
        ("segments_two_pools", "2"),
        ("end_again", "-1"),
        (
            "end_again_error",
            "endAllocatePool: not currently recording to mempool_id",
        ),
        ("release_unknown", "-1"),
    ] {
        assert_eq!(got.get(key).copied(), Some(want), "{key}\n{stdout}");
    }
}
