//! Fuzzes the RMM CSV reader and loader: see `cachalot_fuzz_checks::rmm_csv`.
//!
//! ```text
//! cargo +nightly fuzz run rmm_csv fuzz/corpus/rmm_csv fuzz/regressions/rmm_csv
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_fuzz_checks::rmm_csv(data));
