//! The Python API's native half: each function loads its input and calls the same library
//! functions as the matching CLI command (often the CLI's own glue in `cachalot_cli::cmd`),
//! with the GIL released, and returns the numbers as the JSON the CLI's `--json` prints plus
//! the text the CLI prints. `python/cachalot/api.py` turns them into result objects.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cachalot_advisor::{CompareOptions, TuneOptions, html, record_timelines, text};
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

/// Reads an HTML page the CLI's writer put in a temporary folder of its own (removed with
/// it, whatever the writer did).
fn html_via(write: impl FnOnce(&Path) -> Result<()>) -> Result<String> {
    let dir = tempfile::Builder::new()
        .prefix("cachalot-html-")
        .tempdir()?;
    let path = dir.path().join("report.html");
    write(&path)?;
    Ok(std::fs::read_to_string(&path)?)
}

/// The options `tune` and `compare` share, as the CLI's own argument struct (so that loading,
/// the capacity rules and the cost model are the CLI's).
#[allow(clippy::too_many_arguments)]
fn advisor_args(
    device: Option<u32>,
    all_devices: bool,
    gpu: Option<String>,
    headroom: Option<u64>,
    threads: Option<usize>,
    costs: Vec<String>,
) -> cmd::tune::AdvisorArgs {
    cmd::tune::AdvisorArgs {
        device,
        all_devices,
        gpu,
        headroom,
        json: false,
        html: None,
        cost_model: None,
        costs,
        threads,
        quiet: true,
    }
}

/// `cachalot tune` (`min_capacity=True`: `--min-capacity`): (JSON, text, HTML or "").
#[pyfunction]
#[pyo3(signature = (traces, capacity=None, min_capacity=false, top=8, threads=None, costs=vec![], html=false, gpu=None, headroom=None, device=None, all_devices=false))]
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
) -> PyResult<(String, String, String)> {
    detached(py, move || {
        let args = advisor_args(device, all_devices, gpu, headroom, threads, costs);
        let w = args.load(&traces)?;
        let cost = args.cost_model()?;
        let mut src = w.source.clone();
        let capacity = if min_capacity {
            0
        } else {
            let (c, note) = args.capacity(capacity, &w)?;
            src.capacity_note = note;
            c
        };
        let opts = TuneOptions {
            capacity,
            cost,
            threads,
            top: top.max(1),
            progress: None,
            own: w.own_candidate()?,
        };
        if min_capacity {
            let r = cachalot_advisor::min_capacity(&w.traces, &opts)?;
            let page = match (&r.tune, html) {
                (Some(t), true) => {
                    html_via(|p| cmd::tune::html_report(&w, &src, t, Some(&r), &opts, p))?
                }
                _ => String::new(),
            };
            return Ok((
                json_string(&text::min_capacity_json(&r))?,
                text::min_capacity_text(&r, &src),
                page,
            ));
        }
        let r = cachalot_advisor::tune(&w.traces, &opts)?;
        let page = if html {
            html_via(|p| cmd::tune::html_report(&w, &src, &r, None, &opts, p))?
        } else {
            String::new()
        };
        Ok((
            json_string(&text::tune_json(&r))?,
            text::tune_text(&r, &src),
            page,
        ))
    })
}

/// `cachalot compare`: (JSON, text, HTML or "").
#[pyfunction]
#[pyo3(signature = (traces, confs, capacity=None, min_capacity=true, threads=None, costs=vec![], html=false, gpu=None, headroom=None, device=None, all_devices=false))]
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
) -> PyResult<(String, String, String)> {
    detached(py, move || {
        cachalot_advisor::compare::candidates(&confs)?;
        let args = advisor_args(device, all_devices, gpu, headroom, threads, costs);
        let w = args.load(&traces)?;
        let mut src = w.source.clone();
        // As the CLI: 80G where neither a capacity, a GPU nor a recorded capacity says.
        let given = match (capacity, &args.gpu, w.recorded_capacity()) {
            (None, None, None) => Some(80 << 30),
            (given, _, _) => given,
        };
        let (capacity, note) = args.capacity(given, &w)?;
        src.capacity_note = note;
        let opts = CompareOptions {
            capacity,
            cost: args.cost_model()?,
            threads,
            min_capacity,
            progress: None,
            own: w.own_candidate()?.map(|c| c.label),
        };
        let r = cachalot_advisor::compare(&w.traces, &confs, &opts)?;
        let page = if html {
            let cands: Vec<_> = r.rows.iter().map(|row| row.candidate.clone()).collect();
            let timelines = record_timelines(&w.traces[0], &cands, capacity, &opts.cost, threads)
                .context("recording the timelines for the HTML report")?;
            html::compare_page(&r, &src, &timelines)
        } else {
            String::new()
        };
        Ok((
            json_string(&text::compare_json(&r))?,
            text::compare_text(&r, &src),
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
        let (csv, rows) = cmd::convert::rmm_csv(&loaded)?;
        std::fs::write(&output, csv)
            .with_context(|| format!("cannot write {}", output.display()))?;
        Ok(rows)
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
