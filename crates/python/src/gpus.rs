//! The GPU table (`cachalot_app::gpus`) for Python: `cachalot.capture.gpus` wraps these.

use pyo3::prelude::*;

use cachalot_app::gpus::Evidence;

use crate::api::ArgumentError;

/// One row of the table (`memory` is CUDA's total; `evidence` is "exact", "torch" or
/// "estimate", the rule then in `source`).
#[pyclass(frozen, get_all, module = "cachalot._native")]
pub struct GpuRow {
    key: String,
    names: Vec<String>,
    name: String,
    device_name: String,
    memory: u64,
    source: String,
    cc_major: u32,
    cc_minor: u32,
    sms: u32,
    l2: u64,
    smem_per_sm: u64,
    smem_optin: u64,
    nominal: u64,
    estimate: bool,
    evidence: &'static str,
    arch: String,
}

/// Every GPU, ordered by memory then key.
#[pyfunction]
pub fn gpus() -> Vec<GpuRow> {
    cachalot_app::gpus::GPUS
        .iter()
        .map(|g| GpuRow {
            key: g.key().to_string(),
            names: g.names.iter().map(|n| n.to_string()).collect(),
            name: g.name.to_string(),
            device_name: g.device_name.to_string(),
            memory: g.usable,
            source: g.source.to_string(),
            cc_major: g.cc.0,
            cc_minor: g.cc.1,
            sms: g.sms,
            l2: g.l2,
            smem_per_sm: g.smem_per_sm,
            smem_optin: g.smem_optin,
            nominal: g.nominal,
            estimate: g.is_estimate(),
            evidence: match g.evidence {
                Evidence::Exact => "exact",
                Evidence::Torch => "torch",
                Evidence::Estimate { .. } => "estimate",
            },
            arch: g.arch.to_string(),
        })
        .collect()
}

/// The key of the GPU called `name` (as `--gpu NAME` reads it); ArgumentError otherwise.
#[pyfunction]
pub fn gpu_key(name: &str) -> PyResult<&'static str> {
    cachalot_app::gpus::find(name)
        .map(|g| g.key())
        .map_err(|e| ArgumentError::new_err(e.to_string()))
}

/// The key of the smallest GPU with at least `need` bytes, or None.
#[pyfunction]
pub fn smallest_gpu(need: u64) -> Option<&'static str> {
    cachalot_app::gpus::smallest_fitting(need).map(|g| g.key())
}

/// The table for people, as `--gpu list` prints it.
#[pyfunction]
pub fn gpu_table() -> String {
    cachalot_app::gpus::table_text()
}

/// What a short name that stands for several cards (`a100`) is taken as, or None.
#[pyfunction]
pub fn gpu_alias_note(name: &str) -> Option<&'static str> {
    cachalot_app::gpus::alias_note(name)
}
