//! `_native.write_output` and `_native.check_output`: the Python package's files (recordings,
//! captures) go through the same writer as the CLI's (`cachalot_trace::output`), so a device,
//! FIFO or symbolic link is never turned into a regular file and a previous result is kept
//! until the new one is complete.

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::api::CachalotError;

fn to_py(e: std::io::Error) -> PyErr {
    CachalotError::new_err(e.to_string())
}

/// Writes `data` to `path` as `cachalot_trace::write_atomic` does (`-` is standard output),
/// with the GIL released.
#[pyfunction]
pub fn write_output(py: Python<'_>, path: PathBuf, data: Vec<u8>) -> PyResult<()> {
    py.detach(move || cachalot_trace::write_output(&path, &data))
        .map_err(to_py)
}

/// Checks before any work that `path` can be written; returns what will be written: `-`, or the
/// path with its symbolic links resolved. Raises `CachalotError` saying why not.
#[pyfunction]
pub fn check_output(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let t = py
        .detach(move || cachalot_trace::check_output(&path))
        .map_err(to_py)?;
    Ok(match t {
        cachalot_trace::Target::Stdout => "-".to_string(),
        cachalot_trace::Target::File(p) | cachalot_trace::Target::Stream(p) => {
            p.to_string_lossy().into_owned()
        }
    })
}
