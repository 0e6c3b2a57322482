//! Fuzzes the snapshot readers (pickle and JSON): see `cachalot_fuzz_checks::snapshot`.
//!
//! ```text
//! cargo +nightly fuzz run snapshot_reader fuzz/corpus/snapshot_reader fuzz/regressions/snapshot_reader -- -max_len=65536
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_fuzz_checks::snapshot(data));
