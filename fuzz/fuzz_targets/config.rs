//! Fuzzes the configuration parser: see `cachalot_fuzz_checks::config`.
//!
//! ```text
//! cargo +nightly fuzz run config fuzz/corpus/config fuzz/regressions/config
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_fuzz_checks::config(data));
