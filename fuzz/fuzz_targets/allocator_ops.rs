//! Fuzzes random allocator call sequences with the invariant checker on, on every backend and
//! capacities across the `u64` range: see `cachalot_fuzz_checks::allocator_ops`.
//!
//! ```text
//! cargo +nightly fuzz run allocator_ops fuzz/corpus/allocator_ops fuzz/regressions/allocator_ops
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_fuzz_checks::allocator_ops(data));
