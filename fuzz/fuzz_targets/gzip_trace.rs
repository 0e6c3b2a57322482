//! Fuzzes gzip decoding of traces: the input after the gzip magic bytes, read as a trace
//! (see `cachalot_fuzz_checks::gzip_trace`).
//!
//! ```text
//! cargo +nightly fuzz run gzip_trace fuzz/corpus/gzip_trace fuzz/regressions/gzip_trace
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_fuzz_checks::gzip_trace(data));
