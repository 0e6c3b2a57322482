//! Statistics under torch's flat `memory_stats()` names (`allocated_bytes.all.current`, …),
//! from the same flattener that writes `memory_summary` and the snapshot pickles.

use cachalot_core::DeviceStats;

pub use cachalot_torchfmt::memory_stats;

/// [`memory_stats`] as a JSON object on one line, keys sorted.
pub fn memory_stats_json(s: &DeviceStats) -> String {
    cachalot_torchfmt::memory_stats_json(s).to_string()
}
