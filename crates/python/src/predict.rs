//! `_native.predict`: capture's answer (`cachalot-app`'s `predict`) for Python, with the GIL
//! released: the traces (one per rank) are loaded once in this process and every question is
//! answered from them; returns (the JSON `capture --json` prints, the report, the exit status).

use std::collections::BTreeMap;
use std::path::PathBuf;

use cachalot_app::outside::RankOutside;
use cachalot_app::predict::PredictRequest;
use pyo3::prelude::*;

use crate::api::{ArgumentError, detached, json_string};

/// Per-rank inputs outside torch's allocator, from their JSON (a list of objects, one per
/// rank); an error quotes what could not be read and what is valid.
fn parse_outside(outside: Option<&str>) -> PyResult<Vec<RankOutside>> {
    let Some(text) = outside else {
        return Ok(Vec::new());
    };
    serde_json::from_str(text).map_err(|e| {
        ArgumentError::new_err(format!(
            "outside={text:?}: {e}; expected a JSON list with one object per rank, keys gpu, \
             extra_contexts, module_loading (\"lazy\" or \"eager\"), nccl (a list of \
             {{\"ranks\": N, \"buffsize\": BYTES, \"channels\": N}})"
        ))
    })
}

/// Capture's prediction for `traces` (one per rank) on `gpu`.
#[pyfunction]
#[pyo3(signature = (traces, gpu, conf=None, reserve=None, headroom=None, outside=None, threads=None, warnings=vec![], torch_stats=BTreeMap::new()))]
#[allow(clippy::too_many_arguments)]
pub fn predict(
    py: Python<'_>,
    traces: Vec<PathBuf>,
    gpu: String,
    conf: Option<String>,
    reserve: Option<u64>,
    headroom: Option<u64>,
    outside: Option<String>,
    threads: Option<usize>,
    warnings: Vec<String>,
    torch_stats: BTreeMap<String, i64>,
) -> PyResult<(String, String, u8)> {
    cachalot_app::gpus::find(&gpu).map_err(|e| ArgumentError::new_err(e.to_string()))?;
    let outside = parse_outside(outside.as_deref())?;
    if threads == Some(0) {
        return Err(ArgumentError::new_err(
            "threads=0: needs at least one worker thread (or None for all cores)",
        ));
    }
    let req = PredictRequest {
        traces,
        gpu,
        conf,
        reserve,
        headroom,
        outside,
        threads,
        warnings,
        torch_stats: torch_stats.into_iter().collect(),
    };
    detached(py, move || {
        let p = cachalot_app::predict::predict(&req)?;
        Ok((json_string(&p.json())?, p.text(), p.exit_status()))
    })
}
