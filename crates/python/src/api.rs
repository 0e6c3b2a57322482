//! The Python API's native half: each function loads its input and calls the same library
//! functions as the matching CLI command (often the CLI's own glue in `cachalot_cli::cmd`),
//! with the GIL released, and returns the numbers as the JSON the CLI's `--json` prints plus
//! the text the CLI prints. `python/cachalot/api.py` turns them into result objects.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cachalot_advisor::{CompareOptions, CostModel, TuneOptions, html, record_timelines, text};
use cachalot_cli::cmd;
use cachalot_core::config::ConfigError as RustConfigError;
use cachalot_replay::report::{ReportMeta, report_json, summary_text};
use cachalot_replay::{LoadError, LoadOptions, ReplayOptions, load_input};
use cachalot_sim::SimConfig;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

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

/// The Python exception for `e`, with the message the CLI prints after `cachalot: `.
fn to_py(e: anyhow::Error) -> PyErr {
    let msg = format!("{e:#}");
    if e.chain().any(|c| c.is::<RustConfigError>()) || e.chain().any(is_advisor_config) {
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

/// Runs `f` without the GIL and converts its error.
fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    py.detach(f).map_err(to_py)
}

fn cost_model(costs: &[String]) -> Result<CostModel> {
    let mut m = CostModel::default();
    for c in costs {
        m.apply_override(c)?;
    }
    Ok(m)
}

fn json_string(v: &serde_json::Value) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

/// `cachalot replay`: returns (JSON of `replay --json`, the summary text, exit status).
#[pyfunction]
#[pyo3(signature = (trace=None, conf=None, capacity=None, device=None, ignore_streams=false, explain=true))]
pub fn replay(
    py: Python<'_>,
    trace: Option<PathBuf>,
    conf: Option<String>,
    capacity: Option<u64>,
    device: Option<u32>,
    ignore_streams: bool,
    explain: bool,
) -> PyResult<(String, String, u8)> {
    detached(py, move || {
        let (input, name) = cmd::replay::load(trace.as_deref(), device)?;
        let resolved = cmd::replay::snapshot_conf(conf.as_deref(), &input)?;
        let trace = &input.trace;
        if trace.stats.allocs == 0 {
            bail!("{name}: the trace has no allocation events: nothing to replay");
        }
        let capacity = capacity
            .or_else(|| input.recorded().and_then(|r| r.capacity))
            .unwrap_or(80 << 30);
        let opts = ReplayOptions {
            conf: resolved.conf.clone(),
            sim: SimConfig::with_capacity(capacity),
            ignore_streams,
            ..ReplayOptions::default()
        };
        let report = cachalot_replay::replay(trace, &opts)?;
        let raw = |var: &str| resolved.source.value(var).map(String::from);
        let meta = ReportMeta {
            trace: name.clone(),
            pytorch_cuda_alloc_conf: raw(cachalot_core::config::CUDA_VAR),
            pytorch_alloc_conf: raw(cachalot_core::config::ALLOC_VAR),
            cachalot_alloc_conf: raw(cachalot_core::config::CACHALOT_VAR),
            ignore_streams,
        };
        let mut v = report_json(&report, &resolved.conf, &trace.stats, capacity, &meta);
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "memory_stats".into(),
                cachalot_torchfmt::memory_stats_json(&report.stats),
            );
        }
        let mut out = format!("trace: {name}\n");
        out.push_str(&summary_text(&report, &trace.stats, capacity));
        if report.ooms.count > 0
            && explain
            && let Some(d) = cachalot_replay::diagnose::diagnose(trace, &opts)?
        {
            out.push_str(&d.to_string());
        }
        let status = u8::from(report.ooms.count > 0);
        Ok((json_string(&v)?, out, status))
    })
}

/// Reads an HTML page the CLI's writer put in a temporary file.
fn html_via(write: impl FnOnce(&Path) -> Result<()>) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("cachalot-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!(
        "{:?}.html",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    ));
    let result = write(&path).and_then(|()| Ok(std::fs::read_to_string(&path)?));
    let _ = std::fs::remove_file(&path);
    result
}

/// `cachalot tune` (`min_capacity=True`: `--min-capacity`): (JSON, text, HTML or "").
#[pyfunction]
#[pyo3(signature = (trace=None, capacity=None, min_capacity=false, top=8, threads=None, costs=vec![], html=false))]
#[allow(clippy::too_many_arguments)]
pub fn tune(
    py: Python<'_>,
    trace: Option<PathBuf>,
    capacity: Option<u64>,
    min_capacity: bool,
    top: usize,
    threads: Option<usize>,
    costs: Vec<String>,
    html: bool,
) -> PyResult<(String, String, String)> {
    detached(py, move || {
        let (trace, name) = cachalot_cli::args::load_trace(trace.as_deref())?;
        if threads == Some(0) {
            bail!("invalid threads=0: need at least one thread");
        }
        let opts = TuneOptions {
            capacity: capacity.unwrap_or(0),
            cost: cost_model(&costs)?,
            threads,
            top: top.max(1),
            progress: None,
        };
        if min_capacity {
            let r = cachalot_advisor::min_capacity(&trace, &opts)?;
            let page = match (&r.tune, html) {
                (Some(t), true) => {
                    html_via(|p| cmd::tune::html_report(&trace, &name, t, &opts, p).map(|_| ()))?
                }
                _ => String::new(),
            };
            return Ok((
                json_string(&text::min_capacity_json(&r))?,
                text::min_capacity_text(&r, &name, trace.ops.len()),
                page,
            ));
        }
        if opts.capacity == 0 {
            bail!("tune needs capacity (e.g. capacity=\"24G\"), or min_capacity=True");
        }
        let r = cachalot_advisor::tune(&trace, &opts)?;
        let page = if html {
            html_via(|p| cmd::tune::html_report(&trace, &name, &r, &opts, p).map(|_| ()))?
        } else {
            String::new()
        };
        Ok((
            json_string(&text::tune_json(&r))?,
            text::tune_text(&r, &name, trace.ops.len()),
            page,
        ))
    })
}

/// `cachalot compare`: (JSON, text, HTML or "").
#[pyfunction]
#[pyo3(signature = (trace, confs, capacity, min_capacity=true, threads=None, costs=vec![], html=false))]
#[allow(clippy::too_many_arguments)]
pub fn compare(
    py: Python<'_>,
    trace: Option<PathBuf>,
    confs: Vec<String>,
    capacity: u64,
    min_capacity: bool,
    threads: Option<usize>,
    costs: Vec<String>,
    html: bool,
) -> PyResult<(String, String, String)> {
    detached(py, move || {
        cachalot_advisor::compare::candidates(&confs)?;
        let (trace, name) = cachalot_cli::args::load_trace(trace.as_deref())?;
        let opts = CompareOptions {
            capacity,
            cost: cost_model(&costs)?,
            threads,
            min_capacity,
            progress: None,
        };
        let r = cachalot_advisor::compare(&trace, &confs, &opts)?;
        let page = if html {
            let cands: Vec<_> = r.rows.iter().map(|row| row.candidate.clone()).collect();
            let timelines = record_timelines(&trace, &cands, capacity, &opts.cost, threads)
                .context("recording the timelines for the HTML report")?;
            html::compare_page(&r, &name, &timelines)
        } else {
            String::new()
        };
        Ok((
            json_string(&text::compare_json(&r))?,
            text::compare_text(&r, &name, trace.ops.len()),
            page,
        ))
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
    use cachalot_replay::diagnose::{devices_with_ooms, explain_snapshot};
    use cachalot_replay::input::{pick_device, read_snapshot_path};
    detached(py, move || {
        if !snapshot.exists() {
            bail!("snapshot file {} does not exist", snapshot.display());
        }
        let snap = read_snapshot_path(&snapshot)?;
        let with_ooms = devices_with_ooms(&snap);
        let device = match (device, &with_ooms[..]) {
            (None, [(d, _)]) if snap.devices_with_history().len() > 1 => *d,
            _ => pick_device(&snap, device, &snapshot)?,
        };
        let d = explain_snapshot(&snap, device, capacity, replay)
            .map_err(|e| anyhow::anyhow!("{}: {e}", snapshot.display()))?;
        let v = serde_json::json!({
            "device": d.device,
            "ooms": d.ooms,
            "devices_with_ooms": d.devices_with_ooms,
            "capacity": d.capacity,
            "capacity_estimated": d.capacity_estimated,
            "conf": d.conf.to_pytorch_string(),
            "conf_source": d.conf_source.to_string(),
        });
        let text = cmd::explain::render(&d, &snapshot.display().to_string());
        Ok((json_string(&v)?, text))
    })
}

/// `cachalot convert`: writes `output` (RMM CSV); returns the number of events written.
#[pyfunction]
#[pyo3(signature = (input, output, device=None))]
pub fn convert(
    py: Python<'_>,
    input: PathBuf,
    output: PathBuf,
    device: Option<u32>,
) -> PyResult<usize> {
    detached(py, move || {
        if !input.exists() {
            bail!("input file {} does not exist", input.display());
        }
        let loaded = load_input(
            &input,
            &LoadOptions {
                device,
                ..LoadOptions::default()
            },
        )?;
        let events = cmd::convert::rmm_events(&loaded);
        let f = std::fs::File::create(&output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        cachalot_torchfmt::write_rmm_csv(std::io::BufWriter::new(f), &events)
            .with_context(|| format!("cannot write {}", output.display()))?;
        Ok(events.len())
    })
}

/// `cachalot config`: (canonical string, [(option, value, default, meaning)], warnings).
#[pyfunction]
#[pyo3(signature = (conf=None, cachalot=None))]
#[allow(clippy::type_complexity)]
pub fn parse_config(
    conf: Option<String>,
    cachalot: Option<String>,
) -> PyResult<(String, Vec<(String, String, String, String)>, Vec<String>)> {
    let resolved =
        cachalot_cli::args::resolve_conf(conf.as_deref(), cachalot.as_deref()).map_err(|e| {
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

/// The byte-size reader the CLI uses for `--capacity` (`24G`, `512M`, bytes).
#[pyfunction]
pub fn parse_size(s: &str) -> PyResult<u64> {
    cachalot_core::parse_byte_size(s)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}
