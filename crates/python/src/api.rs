//! The Python API's native half: each function calls the application layer (`cachalot-app`)
//! as the matching CLI command does, with the GIL released, and returns what the CLI's
//! `--json` prints (as a JSON string) plus the text it prints and, for tune and compare, the
//! HTML report as a string. `python/cachalot/api.py` turns them into result objects.

use std::path::PathBuf;

use anyhow::Result;
use cachalot_app::compare::CompareRequest;
use cachalot_app::explain::ExplainRequest;
use cachalot_app::replay::ReplayRequest;
use cachalot_app::tune::TuneRequest;
use cachalot_app::workload::AdvisorOptions;
use cachalot_core::config::ConfigError as RustConfigError;
use cachalot_replay::LoadError;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

create_exception!(
    _native,
    CachalotError,
    PyException,
    "An error cachalot reports (the CLI's message)."
);
create_exception!(
    _native,
    ConfigError,
    CachalotError,
    "A configuration torch 2.15 would reject."
);
create_exception!(
    _native,
    TraceError,
    CachalotError,
    "A trace or snapshot that cannot be read."
);
/// `ArgumentError`: an argument cachalot cannot use (a size, a count, a GPU name). One class
/// for the whole package (`cachalot.torch` raises it too), a `CachalotError` and a
/// `ValueError`, so it is created at import as `type("ArgumentError", (CachalotError,
/// ValueError), ...)`: `create_exception!` takes a single base.
pub struct ArgumentError;

static ARGUMENT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

impl ArgumentError {
    /// The class (created once per interpreter).
    pub fn type_object(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
        let t = ARGUMENT_ERROR.get_or_try_init(py, || -> PyResult<Py<PyType>> {
            let bases = PyTuple::new(
                py,
                [
                    py.get_type::<CachalotError>(),
                    py.get_type::<PyValueError>(),
                ],
            )?;
            let dict = PyDict::new(py);
            dict.set_item("__module__", "_native")?; // as create_exception! names its siblings
            dict.set_item(
                "__doc__",
                "An argument cachalot cannot use (a size, a count, a GPU name, a device): the \
                 message quotes it and says what would be valid. Also a ValueError.",
            )?;
            let t = py
                .get_type::<PyType>()
                .call1(("ArgumentError", bases, dict))?
                .cast_into::<PyType>()?;
            Ok(t.unbind())
        })?;
        Ok(t.bind(py).clone())
    }

    /// The error with `msg` (the class is looked up when the error is raised).
    pub fn new_err(msg: impl Into<String>) -> PyErr {
        let msg = msg.into();
        Python::attach(|py| match Self::type_object(py) {
            Ok(t) => PyErr::from_type(t, msg),
            Err(e) => e,
        })
    }
}

/// The Python exception for `e`, with the message the CLI prints after `cachalot: `.
fn to_py(e: anyhow::Error) -> PyErr {
    let msg = format!("{e:#}");
    let rejected =
        |c: &(dyn std::error::Error + 'static)| c.is::<cachalot_app::release::Rejected>();
    if e.chain().any(|c| c.is::<RustConfigError>())
        || e.chain().any(is_advisor_config)
        || e.chain().any(rejected)
    {
        ConfigError::new_err(msg)
    } else if e.chain().any(|c| c.is::<LoadError>()) || msg.contains("does not exist") {
        TraceError::new_err(msg)
    } else {
        CachalotError::new_err(msg)
    }
}

fn is_advisor_config(c: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        c.downcast_ref::<cachalot_advisor::AdvisorError>(),
        Some(cachalot_advisor::AdvisorError::Config { .. })
    )
}

/// Runs `f` without the GIL and converts its error; Ctrl-C stops it and raises
/// `KeyboardInterrupt` (`crate::interrupt`).
pub(crate) fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T> + Send,
) -> PyResult<T> {
    crate::interrupt::interruptible(py, f)?.map_err(to_py)
}

pub(crate) fn json_string(v: &serde_json::Value) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

/// Python keeps no notes of its own on stderr: a library call does not print.
fn silent(_: String) {}

/// `torch=`: the release, read as `--torch` reads it; ArgumentError quoting a bad one.
fn release(torch: Option<String>) -> PyResult<Option<cachalot_core::config::TorchVersion>> {
    torch
        .map(|t| t.parse::<cachalot_core::config::TorchVersion>())
        .transpose()
        .map_err(|e| ArgumentError::new_err(e.to_string()))
}

/// `cachalot replay`: returns (JSON of `replay --json`, the summary text, exit status).
#[pyfunction]
#[pyo3(signature = (trace=None, conf=None, capacity=None, device=None, ignore_streams=false, explain=true, torch=None))]
#[allow(clippy::too_many_arguments)]
pub fn replay(
    py: Python<'_>,
    trace: Option<PathBuf>,
    conf: Option<String>,
    capacity: Option<u64>,
    device: Option<u32>,
    ignore_streams: bool,
    explain: bool,
    torch: Option<String>,
) -> PyResult<(String, String, u8)> {
    let release = release(torch)?;
    detached(py, move || {
        let req = ReplayRequest {
            trace,
            conf,
            capacity,
            device,
            ignore_streams,
            explain,
            release,
            ..ReplayRequest::default()
        };
        let r = cachalot_app::replay::replay(req, &mut silent)?;
        if let Some(e) = r.fatal {
            return Err(e.into());
        }
        Ok((json_string(&r.json())?, r.text()?, r.exit_status()))
    })
}

fn advisor(
    device: Option<u32>,
    all_devices: bool,
    gpu: Option<String>,
    headroom: Option<u64>,
    threads: Option<usize>,
    costs: Vec<String>,
) -> AdvisorOptions {
    AdvisorOptions {
        device,
        all_devices,
        gpu,
        headroom,
        cost_model: None,
        costs,
        threads,
    }
}

/// `cachalot tune` (`min_capacity=True`: `--min-capacity`): (JSON, text, HTML or "").
#[pyfunction]
#[pyo3(signature = (traces, capacity=None, min_capacity=false, top=8, threads=None, costs=vec![], html=false, gpu=None, headroom=None, device=None, all_devices=false, torch=None))]
#[allow(clippy::too_many_arguments)]
pub fn tune(
    py: Python<'_>,
    traces: Vec<PathBuf>,
    capacity: Option<u64>,
    min_capacity: bool,
    top: usize,
    threads: Option<usize>,
    costs: Vec<String>,
    html: bool,
    gpu: Option<String>,
    headroom: Option<u64>,
    device: Option<u32>,
    all_devices: bool,
    torch: Option<String>,
) -> PyResult<(String, String, String)> {
    let release = release(torch)?;
    detached(py, move || {
        let req = TuneRequest {
            traces,
            capacity,
            min_capacity,
            top,
            release,
            common: advisor(device, all_devices, gpu, headroom, threads, costs),
        };
        let r = cachalot_app::tune::tune(&req, None, &mut silent)?;
        let page = if html {
            r.html()?.unwrap_or_default()
        } else {
            String::new()
        };
        Ok((json_string(&r.json())?, r.text(), page))
    })
}

/// `cachalot compare`: (JSON, text, HTML or "").
#[pyfunction]
#[pyo3(signature = (traces, confs, capacity=None, min_capacity=true, threads=None, costs=vec![], html=false, gpu=None, headroom=None, device=None, all_devices=false, torch=None))]
#[allow(clippy::too_many_arguments)]
pub fn compare(
    py: Python<'_>,
    traces: Vec<PathBuf>,
    confs: Vec<String>,
    capacity: Option<u64>,
    min_capacity: bool,
    threads: Option<usize>,
    costs: Vec<String>,
    html: bool,
    gpu: Option<String>,
    headroom: Option<u64>,
    device: Option<u32>,
    all_devices: bool,
    torch: Option<String>,
) -> PyResult<(String, String, String)> {
    let release = release(torch)?;
    detached(py, move || {
        let req = CompareRequest {
            traces,
            confs,
            capacity,
            min_capacity,
            release,
            common: advisor(device, all_devices, gpu, headroom, threads, costs),
        };
        let r = cachalot_app::compare::compare(&req, None, &mut silent)?;
        let page = if html { r.html()? } else { String::new() };
        Ok((json_string(&r.json())?, r.text(), page))
    })
}

/// `cachalot explain`: (JSON of the headline numbers, the text).
#[pyfunction]
#[pyo3(signature = (snapshot, device=None, capacity=None, replay=true))]
pub fn explain(
    py: Python<'_>,
    snapshot: PathBuf,
    device: Option<u32>,
    capacity: Option<u64>,
    replay: bool,
) -> PyResult<(String, String)> {
    detached(py, move || {
        let r = cachalot_app::explain::explain(&ExplainRequest {
            snapshot,
            device,
            capacity,
            replay,
        })?;
        Ok((json_string(&r.json())?, r.text()))
    })
}

/// `cachalot convert`: writes `output` (RMM CSV, atomically); returns the number of events.
#[pyfunction]
#[pyo3(signature = (input, output, device=None))]
pub fn convert(
    py: Python<'_>,
    input: PathBuf,
    output: PathBuf,
    device: Option<u32>,
) -> PyResult<usize> {
    detached(py, move || {
        let c = cachalot_app::convert::convert(&input, device)?;
        c.write(&output)?;
        Ok(c.rows)
    })
}

/// `cachalot config`: (canonical string, [(option, value, default, meaning)], warnings).
#[pyfunction]
#[pyo3(signature = (conf=None, cachalot=None))]
#[allow(clippy::type_complexity)]
pub fn parse_config(
    py: Python<'_>,
    conf: Option<String>,
    cachalot: Option<String>,
) -> PyResult<(String, Vec<(String, String, String, String)>, Vec<String>)> {
    let resolved = py
        .detach(|| cachalot_app::workload::resolve_conf(conf.as_deref(), cachalot.as_deref()))
        .map_err(|e| {
            ConfigError::new_err(format!("{e}\n  torch 2.15 says: {}", e.torch_message()))
        })?;
    let rows = resolved
        .conf
        .describe()
        .into_iter()
        .map(|(k, v, d, m)| (k, v, d, m.to_string()))
        .collect();
    let warnings = resolved.warnings.iter().map(|w| w.to_string()).collect();
    Ok((resolved.conf.to_pytorch_string(), rows, warnings))
}

/// The configuration string torch 2.15 takes from the environment, as its snapshots record it
/// (`allocator_settings`): the first set of `PYTORCH_CUDA_ALLOC_CONF`, `PYTORCH_HIP_ALLOC_CONF`,
/// `PYTORCH_ALLOC_CONF` (an empty one counts as set), `""` when none is; ConfigError when torch
/// would reject it.
#[pyfunction]
pub fn env_conf(py: Python<'_>) -> PyResult<String> {
    let resolved = py
        .detach(|| cachalot_app::workload::resolve_conf(None, None))
        .map_err(|e| ConfigError::new_err(e.to_string()))?;
    Ok(resolved.conf.last_allocator_settings)
}

/// The byte-size reader (`24G`, `512M`, bytes), as every size cachalot reads.
#[pyfunction]
pub fn parse_size(s: &str) -> PyResult<u64> {
    cachalot_core::parse_byte_size(s).map_err(|e| ArgumentError::new_err(e.to_string()))
}

/// The torch release a version string names (`2.9.1+cu128` -> `2.9`), from the version table;
/// a string outside the releases cachalot knows is an ArgumentError saying which it knows.
#[pyfunction]
pub fn torch_release(version: &str) -> PyResult<String> {
    version
        .parse::<cachalot_core::config::TorchVersion>()
        .map(|v| v.to_string())
        .map_err(|e| ArgumentError::new_err(e.to_string()))
}

/// The keys of torch 2.15's `memory_stats()` that the release `version` names does not have
/// (`cachalot.torch.memory_stats()` leaves them out for it).
#[pyfunction]
pub fn torch_stats_absent(version: &str) -> PyResult<Vec<String>> {
    version
        .parse::<cachalot_core::config::TorchVersion>()
        .map(|v| v.stats_absent().into_iter().map(String::from).collect())
        .map_err(|e| ArgumentError::new_err(e.to_string()))
}

/// The CLI's `--capacity`/`--headroom` reader: [`parse_size`], but a plain number below
/// 1 MiB needs a unit.
#[pyfunction]
pub fn parse_capacity(s: &str) -> PyResult<u64> {
    cachalot_app::workload::parse_capacity(s).map_err(ArgumentError::new_err)
}
