//! The cost model: an estimate of the time a replay's device calls would take on a real GPU.
//!
//! The simulator counts device calls exactly (they are checked against torch 2.15's own
//! allocator); what each call costs on real hardware is not something a simulator can know.
//! The constants below are **estimates**, with where each comes from, and every one can be
//! overridden (`--cost NAME=MICROSECONDS`, or a JSON file of the same names). They serve to
//! rank configurations that are otherwise equal, not to predict a step time.
//!
//! | constant | default | counted per | source |
//! |---|---|---|---|
//! | `cuda_malloc_us` | 50 µs | successful `cudaMalloc` | measured ≈ 50 µs per call for 4 KB–512 KB, more above (Univ. of Virginia CUDA support pages, "Memory Allocation Overhead") |
//! | `cuda_malloc_failed_us` | 50 µs | failed `cudaMalloc` | assumed equal to a small successful call |
//! | `reserve_per_gib_us` | 200 µs | GiB obtained from the device | estimate: allocation time grows with size (same source), no published figure used |
//! | `cuda_free_us` | 100 µs | `cudaFree` | estimate; `cudaFree` synchronizes the device (CUDA C++ Best Practices Guide: allocation and de-allocation "are expensive operations") |
//! | `page_map_us` | 20 µs | expandable page mapped (`cuMemCreate` + `cuMemMap` + `cuMemSetAccess`) | estimate (CUDA driver API, Virtual Memory Management; NVIDIA blog "Introducing Low-Level GPU Virtual Memory Management") |
//! | `page_unmap_us` | 20 µs | expandable page unmapped (`cuMemUnmap` + `cuMemRelease`) | estimate, as above |
//! | `address_reserve_us` | 5 µs | `cuMemAddressReserve` | estimate |
//! | `synchronize_us` | 500 µs | full synchronize of all streams (each retry's cache flush) | estimate: draining the queued kernels; workload-dependent |

use std::fmt;

use cachalot_core::DeviceStats;
use cachalot_sim::SimCounters;
use serde_json::Value;

use crate::AdvisorError;

/// Per-call costs in microseconds. See the module documentation for the sources.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    /// A successful `cudaMalloc`.
    pub cuda_malloc_us: f64,
    /// A failed `cudaMalloc` (out of memory).
    pub cuda_malloc_failed_us: f64,
    /// Each GiB obtained from the device (by `cudaMalloc` or by mapping expandable pages).
    pub reserve_per_gib_us: f64,
    /// A `cudaFree`.
    pub cuda_free_us: f64,
    /// Mapping one expandable-segment page.
    pub page_map_us: f64,
    /// Unmapping one expandable-segment page.
    pub page_unmap_us: f64,
    /// Reserving virtual address space for an expandable segment.
    pub address_reserve_us: f64,
    /// Synchronizing all streams (each retry's cache flush does it once).
    pub synchronize_us: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            cuda_malloc_us: 50.0,
            cuda_malloc_failed_us: 50.0,
            reserve_per_gib_us: 200.0,
            cuda_free_us: 100.0,
            page_map_us: 20.0,
            page_unmap_us: 20.0,
            address_reserve_us: 5.0,
            synchronize_us: 500.0,
        }
    }
}

/// The names of the constants, in documentation order.
pub const COST_NAMES: [&str; 8] = [
    "cuda_malloc_us",
    "cuda_malloc_failed_us",
    "reserve_per_gib_us",
    "cuda_free_us",
    "page_map_us",
    "page_unmap_us",
    "address_reserve_us",
    "synchronize_us",
];

/// The counts a cost is computed from: everything is cumulative, so a cost computed part-way
/// through a replay never exceeds the final one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Successful `cudaMalloc`s.
    pub cuda_malloc: u64,
    /// Failed `cudaMalloc`s.
    pub cuda_malloc_failed: u64,
    /// `cudaFree`s.
    pub cuda_free: u64,
    /// Expandable pages mapped.
    pub page_map: u64,
    /// Expandable pages unmapped.
    pub page_unmap: u64,
    /// Virtual address reservations.
    pub address_reserve: u64,
    /// Full synchronizations (`synchronize_and_free_events`).
    pub synchronize: u64,
    /// Bytes obtained from the device in total (`reserved_bytes.all.allocated`).
    pub reserved_bytes_total: u64,
}

impl CallCounts {
    /// Reads the counts from the allocator's statistics and the device's counters.
    pub fn from_replay(stats: &DeviceStats, device: &SimCounters) -> Self {
        CallCounts {
            cuda_malloc: device.cuda_malloc,
            cuda_malloc_failed: device.cuda_malloc_failed,
            cuda_free: device.cuda_free,
            page_map: device.mem_map,
            page_unmap: device.mem_unmap,
            address_reserve: device.address_reserve,
            synchronize: stats.num_sync_all_streams.max(0) as u64,
            reserved_bytes_total: stats.reserved_bytes.all().allocated.max(0) as u64,
        }
    }
}

impl CostModel {
    /// The estimated time of these device calls, in microseconds.
    pub fn cost_us(&self, c: &CallCounts) -> f64 {
        self.cuda_malloc_us * c.cuda_malloc as f64
            + self.cuda_malloc_failed_us * c.cuda_malloc_failed as f64
            + self.reserve_per_gib_us * (c.reserved_bytes_total as f64 / (1u64 << 30) as f64)
            + self.cuda_free_us * c.cuda_free as f64
            + self.page_map_us * c.page_map as f64
            + self.page_unmap_us * c.page_unmap as f64
            + self.address_reserve_us * c.address_reserve as f64
            + self.synchronize_us * c.synchronize as f64
    }

    fn slot(&mut self, name: &str) -> Option<&mut f64> {
        Some(match name {
            "cuda_malloc_us" => &mut self.cuda_malloc_us,
            "cuda_malloc_failed_us" => &mut self.cuda_malloc_failed_us,
            "reserve_per_gib_us" => &mut self.reserve_per_gib_us,
            "cuda_free_us" => &mut self.cuda_free_us,
            "page_map_us" => &mut self.page_map_us,
            "page_unmap_us" => &mut self.page_unmap_us,
            "address_reserve_us" => &mut self.address_reserve_us,
            "synchronize_us" => &mut self.synchronize_us,
            _ => return None,
        })
    }

    /// The constants as (name, value) pairs, in documentation order.
    pub fn entries(&self) -> [(&'static str, f64); 8] {
        [
            ("cuda_malloc_us", self.cuda_malloc_us),
            ("cuda_malloc_failed_us", self.cuda_malloc_failed_us),
            ("reserve_per_gib_us", self.reserve_per_gib_us),
            ("cuda_free_us", self.cuda_free_us),
            ("page_map_us", self.page_map_us),
            ("page_unmap_us", self.page_unmap_us),
            ("address_reserve_us", self.address_reserve_us),
            ("synchronize_us", self.synchronize_us),
        ]
    }

    /// Sets one constant by name. The value must be a finite number ≥ 0.
    pub fn set(&mut self, name: &str, value: f64) -> Result<(), AdvisorError> {
        if !value.is_finite() || value < 0.0 {
            return Err(AdvisorError::Cost(format!(
                "cost '{name}' must be a finite number of microseconds >= 0, got {value}"
            )));
        }
        let slot = self.slot(name).ok_or_else(|| {
            AdvisorError::Cost(format!(
                "unknown cost '{name}'; known costs: {}",
                COST_NAMES.join(", ")
            ))
        })?;
        *slot = value;
        Ok(())
    }

    /// Applies one `NAME=MICROSECONDS` override (the `--cost` flag).
    pub fn apply_override(&mut self, spec: &str) -> Result<(), AdvisorError> {
        let (name, value) = spec.split_once('=').ok_or_else(|| {
            AdvisorError::Cost(format!(
                "invalid cost override '{spec}': expected NAME=MICROSECONDS, e.g. cuda_free_us=250"
            ))
        })?;
        let v: f64 = value.trim().parse().map_err(|_| {
            AdvisorError::Cost(format!(
                "invalid cost override '{spec}': '{}' is not a number",
                value.trim()
            ))
        })?;
        self.set(name.trim(), v)
    }

    /// Applies a JSON object of `{"NAME": MICROSECONDS, ...}` (any subset of the names).
    pub fn apply_json(&mut self, text: &str) -> Result<(), AdvisorError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| AdvisorError::Cost(format!("cost model file is not valid JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| {
            AdvisorError::Cost("cost model file must be a JSON object of NAME: MICROSECONDS".into())
        })?;
        for (name, value) in obj {
            let x = value.as_f64().ok_or_else(|| {
                AdvisorError::Cost(format!(
                    "cost '{name}' in the cost model file must be a number, got {value}"
                ))
            })?;
            self.set(name, x)?;
        }
        Ok(())
    }
}

impl fmt::Display for CostModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .entries()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        f.write_str(&parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_adds_every_term() {
        let m = CostModel::default();
        let c = CallCounts {
            cuda_malloc: 2,
            cuda_malloc_failed: 1,
            cuda_free: 3,
            page_map: 4,
            page_unmap: 5,
            address_reserve: 1,
            synchronize: 2,
            reserved_bytes_total: 1 << 31,
        };
        let want = 2.0 * 50.0
            + 50.0
            + 2.0 * 200.0
            + 3.0 * 100.0
            + 4.0 * 20.0
            + 5.0 * 20.0
            + 5.0
            + 2.0 * 500.0;
        assert_eq!(m.cost_us(&c), want);
    }

    #[test]
    fn overrides_by_flag_and_json() {
        let mut m = CostModel::default();
        m.apply_override("cuda_free_us=250").unwrap();
        assert_eq!(m.cuda_free_us, 250.0);
        m.apply_json(r#"{"synchronize_us": 2000, "page_map_us": 1.5}"#)
            .unwrap();
        assert_eq!(m.synchronize_us, 2000.0);
        assert_eq!(m.page_map_us, 1.5);
    }

    #[test]
    fn bad_overrides_quote_the_input() {
        let mut m = CostModel::default();
        let e = m.apply_override("nope=1").unwrap_err().to_string();
        assert!(e.contains("'nope'"), "{e}");
        let e = m.apply_override("cuda_free_us").unwrap_err().to_string();
        assert!(e.contains("'cuda_free_us'"), "{e}");
        let e = m.apply_override("cuda_free_us=x").unwrap_err().to_string();
        assert!(e.contains("'x'"), "{e}");
        let e = m.apply_override("cuda_free_us=-1").unwrap_err().to_string();
        assert!(e.contains("-1"), "{e}");
        assert!(m.apply_json("[1]").is_err());
        assert!(m.apply_json(r#"{"cuda_free_us": "fast"}"#).is_err());
    }
}
