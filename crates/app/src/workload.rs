//! Inputs as workloads, and the settings and options every command shares: the bundled trace,
//! one file (any supported format) as a program's whole workload, several files or a
//! snapshot's devices as the parts one configuration must serve ([`Loaded`]), the allocator
//! settings a replay uses, and the advisor's options ([`AdvisorOptions`]: capacity rules and
//! the cost model).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cachalot_advisor::{Candidate, CostModel, text};
use cachalot_core::config::{ConfigError, Overrides, Settings};
use cachalot_core::format_size;
use cachalot_replay::{LoadOptions, LoadedInput, LoadedTrace};

use crate::Notes;
use crate::gpu_dependent::{GpuDependent, gpu_dependent, recorded_gpu};

/// The trace bundled into the binary, replayed when no trace is given: GPT-2 124M training
/// (AdamW, batch 8 × 1024 tokens, 6 steps), 11,940 events.
pub const BUNDLED_TRACE: &[u8] = include_bytes!("../assets/gpt2-train.csv.gz");
/// Its name in reports.
pub const BUNDLED_NAME: &str = "<bundled gpt2-train.csv.gz>";

/// The capacity `replay` and `compare` use where nothing else says: 80 GiB.
pub const DEFAULT_CAPACITY: u64 = 80 << 30;

/// A device capacity or headroom: [`cachalot_core::parse_byte_size`], but a plain number
/// below 1 MiB needs a unit (`--capacity 24` is far more likely meant as 24G than as 24 bytes).
pub fn parse_capacity(s: &str) -> Result<u64, String> {
    let bytes = cachalot_core::parse_byte_size(s).map_err(|e| e.to_string())?;
    let t = s.trim();
    if bytes < 1 << 20 && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "'{s}' has no unit and would mean {bytes} bytes; give a unit, e.g. {t}G or {t}M \
             (plain numbers are bytes and must be at least 1048576)"
        ));
    }
    Ok(bytes)
}

/// The settings from the environment, read as torch 2.15 reads it, with `conf` (PyTorch's
/// grammar) in place of the PyTorch variables and `cachalot` in place of
/// `CACHALOT_ALLOC_CONF` where given.
pub fn resolve_conf(conf: Option<&str>, cachalot: Option<&str>) -> Result<Settings, ConfigError> {
    resolve_conf_in(|k| std::env::var(k).ok(), conf, cachalot)
}

/// [`resolve_conf`] in the environment `env` (a variable's value, or `None` where unset).
pub fn resolve_conf_in(
    env: impl Fn(&str) -> Option<String>,
    conf: Option<&str>,
    cachalot: Option<&str>,
) -> Result<Settings, ConfigError> {
    let over = Overrides {
        pytorch: conf,
        cachalot,
    };
    Settings::resolve(env, over)
}

/// Loads a trace file, or the bundled trace when `path` is `None`. Returns the trace and the
/// name to report.
pub fn load_trace(path: Option<&Path>) -> Result<(LoadedTrace, String)> {
    match path {
        Some(p) => {
            if !p.exists() {
                bail!("trace file {} does not exist", p.display());
            }
            let t = cachalot_replay::load_path(p)
                .with_context(|| format!("cannot read trace {}", p.display()))?;
            Ok((t, p.display().to_string()))
        }
        None => {
            let t = cachalot_replay::load_bytes(BUNDLED_TRACE).context("bundled trace")?;
            Ok((t, BUNDLED_NAME.to_string()))
        }
    }
}

/// Loads a trace argument as the program's whole workload (any supported format), or the
/// bundled trace; `device` picks a snapshot's device.
pub fn load_input(path: Option<&Path>, device: Option<u32>) -> Result<(LoadedInput, String)> {
    match path {
        Some(p) => {
            if !p.exists() {
                bail!("trace file {} does not exist", p.display());
            }
            let input = cachalot_replay::load_input(p, &LoadOptions::workload(device))?;
            if device.is_some() && input.snapshot_events().is_none() {
                bail!(
                    "--device: {} is an RMM CSV trace, which has one device; --device is for \
                     torch snapshots with history on several devices",
                    p.display()
                );
            }
            Ok((input, p.display().to_string()))
        }
        None => {
            let (trace, name) = load_trace(None)?;
            Ok((
                LoadedInput {
                    trace,
                    kind: cachalot_replay::input::InputKind::RmmCsv,
                },
                name,
            ))
        }
    }
}

/// The configuration to replay: `conf`, else the snapshot's own (said in `notes`), else the
/// environment.
pub fn snapshot_conf(conf: Option<&str>, input: &LoadedInput, notes: Notes) -> Result<Settings> {
    let recorded = input.recorded().and_then(|r| r.alloc_conf.clone());
    match (conf, recorded) {
        (None, Some(rec)) => {
            let resolved = resolve_conf(Some(&rec), None).with_context(|| {
                format!(
                    "the snapshot's own allocator_settings '{rec}' (pass --conf to replay another)"
                )
            })?;
            let shown = if rec.is_empty() {
                "the default".to_string()
            } else {
                format!("'{rec}'")
            };
            notes(format!(
                "configuration: the snapshot's own ({shown}, from its allocator_settings); \
                 pass --conf to replay another"
            ));
            for var in ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"] {
                if std::env::var_os(var).is_some() {
                    notes(format!(
                        "note: {var} from the environment is not used for a snapshot; pass --conf \"${var}\" to use it"
                    ));
                }
            }
            Ok(resolved)
        }
        _ => Ok(resolve_conf(conf, None)?),
    }
}

/// The options `tune` and `compare` share (the CLI's `AdvisorArgs`, less what only it does:
/// output format, progress, the HTML file).
#[derive(Clone, Debug, Default)]
pub struct AdvisorOptions {
    /// For torch snapshots with history on several devices: the device to replay.
    pub device: Option<u32>,
    /// For torch snapshots: every device with history as one part each.
    pub all_devices: bool,
    /// A common GPU instead of a capacity (its name, as `--gpu`).
    pub gpu: Option<String>,
    /// Memory kept outside PyTorch's allocator, taken off the capacity.
    pub headroom: Option<u64>,
    /// A cost-model JSON file.
    pub cost_model: Option<PathBuf>,
    /// Cost-model overrides `NAME=US`, applied after the file.
    pub costs: Vec<String>,
    /// Worker threads (`None`: all cores).
    pub threads: Option<usize>,
}

/// The most worker threads a request may ask for (more is a typo, not a machine).
pub const MAX_THREADS: usize = 4096;

impl AdvisorOptions {
    /// Loads the traces as one workload (see [`Loaded`]).
    /// With `--gpu`, the workload also says what may differ from the GPU that recorded it
    /// ([`Loaded::gpu_dependent`], and in its notes).
    pub fn load(&self, paths: &[PathBuf]) -> Result<Loaded> {
        let target = match self.gpu.as_deref() {
            Some(name) => Some(crate::gpus::find(name)?),
            None => None,
        };
        let mut w = Loaded::load(paths, self.device, self.all_devices)?;
        if let Some(target) = target {
            let device = w
                .inputs
                .first()
                .and_then(|i| i.snapshot_events())
                .map(|e| e.device);
            let recorded = paths.iter().find_map(|p| recorded_gpu(p, device));
            if let Some(d) = gpu_dependent(recorded, target) {
                w.source.notes.extend(d.lines());
                w.gpu_dependent = Some(d);
            }
        }
        Ok(w)
    }

    /// The capacity to replay at, and where it comes from: `given` or the GPU, else the
    /// capacity the snapshots recorded, else `fallback`; less the headroom.
    pub fn capacity(
        &self,
        given: Option<u64>,
        w: &Loaded,
        fallback: Option<u64>,
    ) -> Result<(u64, Option<String>)> {
        let given = match (given, &self.gpu, w.recorded_capacity()) {
            (None, None, None) => fallback,
            (given, _, _) => given,
        };
        let (base, mut note) = match (given, &self.gpu) {
            (Some(c), _) => (c, None),
            (None, Some(name)) => {
                let g = crate::gpus::find(name)?;
                let taken_as = crate::gpus::alias_note(name)
                    .map(|n| format!("; {n}"))
                    .unwrap_or_default();
                (
                    g.usable,
                    Some(format!(
                        "{}: {}, CUDA's total, the most one process can allocate{} ({}){taken_as}",
                        g.name,
                        format_size(g.usable),
                        if g.is_estimate() {
                            " (an estimate)"
                        } else {
                            ""
                        },
                        g.source
                    )),
                )
            }
            (None, None) => match w.recorded_capacity() {
                Some(c) => (
                    c,
                    Some(format!(
                        "{}, where the snapshot ran out of memory (free device memory plus \
                         reserved at its last out-of-memory); pass --capacity to change it",
                        format_size(c)
                    )),
                ),
                None => bail!(
                    "needs --capacity SIZE (e.g. --capacity 24G) or --gpu NAME, or \
                     --min-capacity"
                ),
            },
        };
        let Some(h) = self.headroom else {
            return Ok((base, note));
        };
        if h >= base {
            bail!(
                "--headroom {} leaves nothing of a {} device",
                format_size(h),
                format_size(base)
            );
        }
        let left = base - h;
        let line = format!(
            "{} for PyTorch's allocator: {} less {} headroom",
            format_size(left),
            format_size(base),
            format_size(h)
        );
        note = Some(match note {
            Some(n) => format!("{line}; {n}"),
            None => line,
        });
        Ok((left, note))
    }

    /// The cost model: the defaults, then the file, then the overrides; and the thread count
    /// checked.
    pub fn cost_model(&self) -> Result<CostModel> {
        let mut m = CostModel::default();
        if let Some(path) = &self.cost_model {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read cost model file {}", path.display()))?;
            m.apply_json(&text)
                .with_context(|| format!("in cost model file {}", path.display()))?;
        }
        for c in &self.costs {
            m.apply_override(c)?;
        }
        match self.threads {
            Some(0) => bail!("invalid --threads '0': need at least one thread"),
            Some(n) if n > MAX_THREADS => {
                bail!("invalid --threads '{n}': at most {MAX_THREADS} worker threads")
            }
            _ => {}
        }
        Ok(m)
    }
}

/// The inputs of `tune` or `compare` as one workload: each file (and, with all devices, each
/// device of a snapshot) is one part that the configuration must serve.
pub struct Loaded {
    /// The traces.
    pub traces: Vec<LoadedTrace>,
    /// The inputs they came from, less their traces (moved into `traces`).
    pub inputs: Vec<LoadedInput>,
    /// Names and notes for the reports.
    pub source: text::Source,
    /// With `--gpu`: what may differ from the GPU that recorded the traces.
    pub gpu_dependent: Option<GpuDependent>,
}

impl Loaded {
    /// Opens `paths` (none: the bundled trace) as one workload.
    pub fn load(paths: &[PathBuf], device: Option<u32>, all_devices: bool) -> Result<Loaded> {
        let mut inputs: Vec<(String, LoadedInput)> = Vec::new();
        if paths.is_empty() {
            if device.is_some() || all_devices {
                bail!("--device and --all-devices are for torch snapshots; no trace was given");
            }
            let (input, name) = load_input(None, None)?;
            inputs.push((name, input));
        }
        for p in paths {
            if all_devices {
                if !p.exists() {
                    bail!("trace file {} does not exist", p.display());
                }
                let all = cachalot_replay::input::load_all_devices(p)?;
                let several = all.len() > 1;
                for input in all {
                    let name = match input.snapshot_events() {
                        Some(e) if several && paths.len() == 1 => format!("device {}", e.device),
                        Some(e) if several => format!("{} (device {})", p.display(), e.device),
                        _ => p.display().to_string(),
                    };
                    inputs.push((name, input));
                }
            } else {
                let (input, name) = load_input(Some(p), device)?;
                let name = match (device, input.snapshot_events()) {
                    (Some(_), Some(e)) => format!("{name} (device {})", e.device),
                    _ => name,
                };
                inputs.push((name, input));
            }
        }
        Ok(Self::from_inputs(
            inputs,
            all_devices && paths.len() == 1,
            paths,
        ))
    }

    /// The workload of named inputs already loaded.
    fn from_inputs(
        inputs: Vec<(String, LoadedInput)>,
        all_devices_of_one: bool,
        paths: &[PathBuf],
    ) -> Loaded {
        let mut source = text::Source {
            name: if all_devices_of_one {
                format!("{} (all devices)", paths[0].display())
            } else {
                inputs
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            events: inputs.iter().map(|(_, i)| i.trace.ops.len()).sum(),
            ..text::Source::default()
        };
        if inputs.len() > 1 {
            source.parts = inputs.iter().map(|(n, _)| n.clone()).collect();
        }
        for (name, input) in &inputs {
            for note in input.notes() {
                source.notes.push(if inputs.len() > 1 {
                    format!("{name}: {note}")
                } else {
                    note
                });
            }
        }
        let mut inputs: Vec<LoadedInput> = inputs.into_iter().map(|(_, i)| i).collect();
        Loaded {
            // Moved, not copied: a snapshot's trace can be hundreds of megabytes.
            traces: inputs
                .iter_mut()
                .map(|i| std::mem::take(&mut i.trace))
                .collect(),
            inputs,
            source,
            gpu_dependent: None,
        }
    }

    /// The smallest capacity the snapshots recorded at an out-of-memory, if any did.
    pub fn recorded_capacity(&self) -> Option<u64> {
        self.inputs
            .iter()
            .filter_map(|i| i.recorded().and_then(|r| r.capacity))
            .min()
    }

    /// The configuration the snapshots recorded (the first one's, if they differ).
    pub fn own_conf(&self) -> Option<String> {
        self.inputs
            .iter()
            .find_map(|i| i.recorded().and_then(|r| r.alloc_conf.clone()))
    }

    /// [`Loaded::own_conf`] as a candidate; a recorded string torch rejects is skipped with
    /// a warning in `notes`.
    pub fn own_candidate(&self, notes: Notes) -> Option<Candidate> {
        let conf = self.own_conf()?;
        match Candidate::parse(conf.trim()) {
            Ok(c) => Some(c),
            Err(e) => {
                notes(format!(
                    "warning: the snapshot's own configuration is not ranked: {e}"
                ));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_plain_numbers_need_a_unit() {
        let e = parse_capacity("24").unwrap_err();
        assert!(e.contains("'24'") && e.contains("24G"), "{e}");
        assert_eq!(parse_capacity("24G"), Ok(24 << 30));
        assert_eq!(parse_capacity("512K"), Ok(512 << 10));
        assert_eq!(parse_capacity("5215617024"), Ok(5_215_617_024));
        assert!(parse_capacity("12Q").unwrap_err().contains("'12Q'"));
    }

    #[test]
    fn capacity_rules() {
        let w = Loaded::load(&[], None, false).unwrap();
        let o = AdvisorOptions::default();
        // Nothing given, nothing recorded: the fallback, or an error naming the options.
        assert_eq!(
            o.capacity(None, &w, Some(7 << 30)).unwrap(),
            (7 << 30, None)
        );
        let e = o.capacity(None, &w, None).unwrap_err().to_string();
        assert!(e.contains("--capacity") && e.contains("--gpu"), "{e}");
        // Headroom comes off and is said; too much is refused with both sizes.
        let h = AdvisorOptions {
            headroom: Some(1 << 30),
            ..AdvisorOptions::default()
        };
        let (c, note) = h.capacity(Some(24 << 30), &w, None).unwrap();
        assert_eq!(c, 23 << 30);
        assert!(note.unwrap().contains("headroom"));
        let e = h.capacity(Some(1 << 30), &w, None).unwrap_err().to_string();
        assert!(e.contains("leaves nothing"), "{e}");
    }

    #[test]
    fn absurd_thread_counts_are_refused() {
        for n in [0, MAX_THREADS + 1, usize::MAX] {
            let o = AdvisorOptions {
                threads: Some(n),
                ..AdvisorOptions::default()
            };
            let e = o.cost_model().unwrap_err().to_string();
            assert!(e.contains(&format!("'{n}'")), "{e}");
        }
    }
}
