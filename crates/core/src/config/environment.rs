//! The environment as torch 2.15 reads it: which of `PYTORCH_CUDA_ALLOC_CONF`,
//! `PYTORCH_HIP_ALLOC_CONF` and `PYTORCH_ALLOC_CONF` each pass reads, `CACHALOT_ALLOC_CONF` on
//! top, and ([`EnvSource`]) where each value came from.

use std::fmt;

use super::errors::{ConfigError, Warning};
use super::passes::{apply_cachalot, parse_cachalot, parse_pytorch, run};
use super::walker::Mode;
use super::{AllocConf, Backend};

/// torch's variable for CUDA builds, read first.
pub const CUDA_VAR: &str = "PYTORCH_CUDA_ALLOC_CONF";
/// torch's ROCm spelling; a CUDA build reads it for the generic keys only.
pub const HIP_VAR: &str = "PYTORCH_HIP_ALLOC_CONF";
/// torch's device-neutral variable, read last.
pub const ALLOC_VAR: &str = "PYTORCH_ALLOC_CONF";
/// cachalot's own variable, applied on top of the PyTorch one.
pub const CACHALOT_VAR: &str = "CACHALOT_ALLOC_CONF";
/// `1` turns caching off (torch's `check_env`: exactly `0` or `1`, anything else is ignored
/// with a warning).
pub const NO_CUDA_CACHING_VAR: &str = "PYTORCH_NO_CUDA_MEMORY_CACHING";
/// The ROCm spelling, which a CUDA build of torch 2.15 also honours (read second).
pub const NO_HIP_CACHING_VAR: &str = "PYTORCH_NO_HIP_MEMORY_CACHING";

/// Where a [`Settings`] came from: which variables torch's passes read, what each was set to,
/// and what was set but not read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvSource {
    /// The variable torch 2.15's generic pass read: the first *set* (even empty) of
    /// `PYTORCH_CUDA_ALLOC_CONF`, `PYTORCH_HIP_ALLOC_CONF`, `PYTORCH_ALLOC_CONF`. It also
    /// gives `last_allocator_settings`.
    pub generic: Option<&'static str>,
    /// The variable torch's CUDA pass and load-time backend choice read: the first set of
    /// `PYTORCH_CUDA_ALLOC_CONF`, `PYTORCH_ALLOC_CONF`.
    pub cuda: Option<&'static str>,
    /// Whether `CACHALOT_ALLOC_CONF` was set and applied on top.
    pub cachalot: bool,
    /// PyTorch variables that were set but not read.
    pub ignored: Vec<&'static str>,
    /// The no-caching variable that turned caching off (`PYTORCH_NO_CUDA_MEMORY_CACHING=1` or
    /// `PYTORCH_NO_HIP_MEMORY_CACHING=1`), if one did and the backend is the native one.
    pub no_caching: Option<&'static str>,
    /// Every variable this resolution looked at that was set, read or ignored, with its value,
    /// in the order torch looks at them. A string given in place of a variable ([`Overrides`])
    /// is listed under the variable it stands for (and the variables it replaces are not).
    pub values: Vec<(&'static str, String)>,
    /// The PyTorch string was given by the caller ([`Overrides::pytorch`]), not read from the
    /// environment.
    pub pytorch_given: bool,
    /// The `CACHALOT_ALLOC_CONF` string was given by the caller ([`Overrides::cachalot`]).
    pub cachalot_given: bool,
}

impl EnvSource {
    /// The value `var` had (or the string given in its place), if it was read and set.
    pub fn value(&self, var: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(v, _)| *v == var)
            .map(|(_, s)| s.as_str())
    }
}

impl fmt::Display for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match (self.generic, self.cuda) {
            (Some(g), Some(c)) if g == c => parts.push(g.to_string()),
            (g, c) => {
                parts.extend(g.map(|g| format!("{g} (generic keys)")));
                parts.extend(c.map(|c| format!("{c} (CUDA keys and backend)")));
            }
        }
        if self.pytorch_given {
            parts = vec!["the given configuration".into()];
        }
        match (self.cachalot, self.cachalot_given) {
            (true, true) => parts.push(format!("the given {CACHALOT_VAR}")),
            (true, false) => parts.push(CACHALOT_VAR.into()),
            _ => {}
        }
        match parts.is_empty() {
            true => f.write_str("defaults (no allocator variable set)")?,
            false => f.write_str(&parts.join(" + "))?,
        }
        if !self.ignored.is_empty() {
            write!(f, "; ignored: {}", self.ignored.join(", "))?;
        }
        if let Some(var) = self.no_caching {
            write!(f, "; {var}=1")?;
        }
        Ok(())
    }
}

/// Reads the allocator variables as torch 2.15 does (`get` is `std::env::var(..).ok()` or a
/// test stub), then applies `CACHALOT_ALLOC_CONF` on top. A variable set to "" counts as set. The
/// no-caching variables are not read here: [`Settings::resolve`] reads everything.
pub fn from_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<(AllocConf, Vec<Warning>, EnvSource), ConfigError> {
    let (mut conf, mut warns, mut src) = read_pytorch_vars(&get)?;
    if let Some(s) = get(CACHALOT_VAR) {
        src.cachalot = true;
        warns.extend(apply_cachalot(&mut conf, &s)?);
        src.values.push((CACHALOT_VAR, s));
    }
    Ok((conf, warns, src))
}

/// The three PyTorch variables, as torch 2.15's passes pick them.
fn read_pytorch_vars(
    get: impl Fn(&str) -> Option<String>,
) -> Result<(AllocConf, Vec<Warning>, EnvSource), ConfigError> {
    let vals: Vec<(&'static str, Option<String>)> =
        [CUDA_VAR, HIP_VAR, ALLOC_VAR].map(|v| (v, get(v))).into();
    let first = |names: &[&str]| {
        let found = vals.iter().find(|(v, s)| names.contains(v) && s.is_some());
        found.map(|(v, s)| (*v, s.as_deref().unwrap_or("")))
    };
    let (generic, cuda) = (
        first(&[CUDA_VAR, HIP_VAR, ALLOC_VAR]),
        first(&[CUDA_VAR, ALLOC_VAR]),
    );
    let mut conf = AllocConf::default();
    let mut warns = run(&mut conf, generic, cuda, Mode::Pytorch, true)?;
    conf.last_allocator_settings = generic.map_or(String::new(), |(_, s)| s.to_string());
    let mut src = EnvSource {
        generic: generic.map(|g| g.0),
        cuda: cuda.map(|c| c.0),
        ..EnvSource::default()
    };
    let read = |v: &str| Some(v) == src.generic || Some(v) == src.cuda;
    src.ignored = vals
        .iter()
        .filter(|(v, s)| s.is_some() && !read(v))
        .map(|(v, _)| *v)
        .collect();
    for var in &src.ignored {
        let msg = format!(
            "ignored: torch 2.15 reads {} instead (PYTORCH_CUDA_ALLOC_CONF, then \
             PYTORCH_HIP_ALLOC_CONF for generic keys only, then PYTORCH_ALLOC_CONF)",
            src.generic.unwrap_or(CUDA_VAR)
        );
        warns.push(Warning::new(var, "", msg));
    }
    if src.generic == Some(HIP_VAR) {
        let msg = format!(
            "a CUDA build of torch 2.15 reads this variable only for the generic keys \
             (max_split_size_mb, expandable_segments, ...); the CUDA keys and backend come from {}",
            src.cuda.unwrap_or("the defaults")
        );
        warns.push(Warning::new(HIP_VAR, "", msg));
    }
    src.values = vals
        .into_iter()
        .filter_map(|(v, s)| Some((v, s?)))
        .collect();
    Ok((conf, warns, src))
}

/// Strings a caller uses in place of the environment (a command line's `--conf`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Overrides<'a> {
    /// A `PYTORCH_CUDA_ALLOC_CONF` string read instead of the three PyTorch variables.
    pub pytorch: Option<&'a str>,
    /// A `CACHALOT_ALLOC_CONF` string read instead of that variable.
    pub cachalot: Option<&'a str>,
}

/// Everything that decides how an allocator behaves, resolved in one place: the PyTorch
/// variables as torch 2.15 reads them, `CACHALOT_ALLOC_CONF` on top, the no-caching variables,
/// the warnings, and where each value came from. The CLI, the Rust API and the C library all
/// get their configuration from here.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Settings {
    /// The configuration. `conf.backend` is [`Backend::Uncached`] when a no-caching variable
    /// turned caching off (ignored with `backend:cudaMallocAsync`, as in torch).
    pub conf: AllocConf,
    /// What torch would warn about, and what was probably not meant.
    pub warnings: Vec<Warning>,
    /// Which variables were read (empty when the settings came from code).
    pub source: EnvSource,
}

impl From<AllocConf> for Settings {
    fn from(conf: AllocConf) -> Self {
        Settings {
            conf,
            ..Settings::default()
        }
    }
}

impl Settings {
    /// A `PYTORCH_CUDA_ALLOC_CONF` string, read as torch 2.15 reads it.
    pub fn parse(pytorch_conf: &str) -> Result<Self, ConfigError> {
        let (conf, warnings) = parse_pytorch(pytorch_conf)?;
        Ok(Settings {
            conf,
            warnings,
            ..Settings::default()
        })
    }

    /// A `CACHALOT_ALLOC_CONF` string: torch's keys plus cachalot's opt-in fixes.
    pub fn parse_cachalot(conf: &str) -> Result<Self, ConfigError> {
        let (conf, warnings) = parse_cachalot(conf)?;
        Ok(Settings {
            conf,
            warnings,
            ..Settings::default()
        })
    }

    /// The process environment ([`Settings::resolve`] with `std::env::var` and no overrides).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with(|k| std::env::var(k).ok())
    }

    /// [`Settings::from_env`] with the variables read through `get`.
    pub fn from_env_with(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::resolve(get, Overrides::default())
    }

    /// Reads the environment through `get` (`std::env::var(..).ok()` or a test stub), with the
    /// strings of `over` in place of the variables they stand for. A variable set to "" counts
    /// as set.
    pub fn resolve(
        get: impl Fn(&str) -> Option<String>,
        over: Overrides,
    ) -> Result<Self, ConfigError> {
        let (mut conf, mut warnings, mut source) = match over.pytorch {
            None => read_pytorch_vars(&get)?,
            Some(s) => {
                let (conf, warnings) = parse_pytorch(s)?;
                let source = EnvSource {
                    generic: Some(CUDA_VAR),
                    cuda: Some(CUDA_VAR),
                    values: vec![(CUDA_VAR, s.to_string())],
                    pytorch_given: true,
                    ..EnvSource::default()
                };
                (conf, warnings, source)
            }
        };
        let cachalot = match over.cachalot {
            Some(s) => Some(s.to_string()),
            None => get(CACHALOT_VAR),
        };
        if let Some(s) = cachalot {
            warnings.extend(apply_cachalot(&mut conf, &s)?);
            source.cachalot = true;
            source.cachalot_given = over.cachalot.is_some();
            source.values.push((CACHALOT_VAR, s));
        }
        let no_caching = read_no_caching(&get, &mut warnings, &mut source);
        if no_caching.is_some() && conf.backend == Backend::Native {
            conf.backend = Backend::Uncached;
            source.no_caching = no_caching;
        }
        Ok(Settings {
            conf,
            warnings,
            source,
        })
    }

    /// The backend these settings select.
    pub fn backend(&self) -> Backend {
        self.conf.backend
    }
}

/// torch's `c10::utils::check_env`: `Some(true)` for exactly `1`, `Some(false)` for `0`,
/// otherwise `None` with torch's warning.
fn check_env(var: &'static str, value: &str, warnings: &mut Vec<Warning>) -> Option<bool> {
    match value {
        "1" => Some(true),
        "0" => Some(false),
        other => {
            warnings.push(Warning {
                torch_text: Some(format!(
                    "Ignoring invalid value for boolean flag {var}: {other}valid values are 0 or 1."
                )),
                ..Warning::new(
                    var,
                    other,
                    format!("ignored, so caching stays on: torch 2.15 reads only 0 or 1 here (write {var}=1 to turn caching off)"),
                )
            });
            None
        }
    }
}

/// torch 2.15 reads both no-caching variables (each with `check_env`, each warned about when
/// invalid) and turns caching off when either is exactly `1`. Returns the variable that did.
fn read_no_caching(
    get: impl Fn(&str) -> Option<String>,
    warnings: &mut Vec<Warning>,
    source: &mut EnvSource,
) -> Option<&'static str> {
    let mut off = None;
    for var in [NO_CUDA_CACHING_VAR, NO_HIP_CACHING_VAR] {
        let Some(value) = get(var) else { continue };
        if check_env(var, &value, warnings) == Some(true) {
            off = off.or(Some(var));
        }
        source.values.push((var, value));
    }
    off
}
