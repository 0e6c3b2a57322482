//! [`Settings`]: the configuration of an allocator, from code or from the environment.

use cachalot_core::config::{EnvSource, Warning, from_env, parse_cachalot, parse_pytorch};
use cachalot_core::{AllocConf, Backend as ConfBackend};

use crate::Result;
use crate::allocator::Backend;

/// The variable that turns caching off, as torch reads it.
pub const NO_CACHING_VAR: &str = "PYTORCH_NO_CUDA_MEMORY_CACHING";

/// Everything that decides how an [`Allocator`](crate::Allocator) behaves.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Settings {
    /// The allocator configuration (`PYTORCH_CUDA_ALLOC_CONF` and cachalot's own keys).
    pub conf: AllocConf,
    /// `PYTORCH_NO_CUDA_MEMORY_CACHING=1`: every request goes to `cudaMalloc` and every free
    /// to `cudaFree` (ignored with `backend:cudaMallocAsync`, as in torch).
    pub no_caching: bool,
    /// What torch would warn about, and what was probably not meant.
    pub warnings: Vec<Warning>,
    /// Which variables were read (empty when the settings came from code).
    pub source: String,
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
    pub fn parse(pytorch_conf: &str) -> Result<Self> {
        let (conf, warnings) = parse_pytorch(pytorch_conf)?;
        Ok(Settings {
            conf,
            warnings,
            ..Settings::default()
        })
    }

    /// A `CACHALOT_ALLOC_CONF` string: torch's keys plus cachalot's opt-in fixes.
    pub fn parse_cachalot(conf: &str) -> Result<Self> {
        let (conf, warnings) = parse_cachalot(conf)?;
        Ok(Settings {
            conf,
            warnings,
            ..Settings::default()
        })
    }

    /// The process environment: `PYTORCH_CUDA_ALLOC_CONF` (then `PYTORCH_ALLOC_CONF`) as torch
    /// 2.15 reads it, `CACHALOT_ALLOC_CONF` applied on top, and
    /// `PYTORCH_NO_CUDA_MEMORY_CACHING`.
    pub fn from_env() -> Result<Self> {
        Self::from_env_with(|k| std::env::var(k).ok())
    }

    /// [`Settings::from_env`] with the variables read through `get`.
    pub fn from_env_with(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let (conf, mut warnings, source): (AllocConf, Vec<Warning>, EnvSource) = from_env(&get)?;
        // torch's check_env: "1" turns caching off, "0" leaves it on, anything else is
        // ignored with a warning.
        let no_caching = match get(NO_CACHING_VAR).as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                warnings.push(Warning {
                    var: NO_CACHING_VAR,
                    entry: other.to_string(),
                    message: "ignored: valid values are 0 or 1".into(),
                    torch_text: Some(format!(
                        "Ignoring invalid value for boolean flag {NO_CACHING_VAR}: {other}valid \
                         values are 0 or 1."
                    )),
                });
                false
            }
        };
        let mut source = source.to_string();
        if no_caching {
            source.push_str(&format!("; {NO_CACHING_VAR}=1"));
        }
        Ok(Settings {
            conf,
            no_caching,
            warnings,
            source,
        })
    }

    /// The backend these settings select.
    pub fn backend(&self) -> Backend {
        match (self.conf.backend, self.no_caching) {
            (ConfBackend::CudaMallocAsync, _) => Backend::CudaMallocAsync,
            (ConfBackend::Native, true) => Backend::Uncached,
            (ConfBackend::Native, false) => Backend::Native,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn backends_from_the_environment() {
        let s = Settings::from_env_with(env(&[])).unwrap();
        assert_eq!(s.backend(), Backend::Native);
        let s = Settings::from_env_with(env(&[(
            "PYTORCH_CUDA_ALLOC_CONF",
            "backend:cudaMallocAsync",
        )]))
        .unwrap();
        assert_eq!(s.backend(), Backend::CudaMallocAsync);
        let s = Settings::from_env_with(env(&[(NO_CACHING_VAR, "1")])).unwrap();
        assert_eq!(s.backend(), Backend::Uncached);
        assert!(
            s.source.ends_with("PYTORCH_NO_CUDA_MEMORY_CACHING=1"),
            "{}",
            s.source
        );
        let s = Settings::from_env_with(env(&[
            (NO_CACHING_VAR, "1"),
            ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
        ]))
        .unwrap();
        assert_eq!(s.backend(), Backend::CudaMallocAsync);
        let s = Settings::from_env_with(env(&[(NO_CACHING_VAR, "yes")])).unwrap();
        assert_eq!(s.backend(), Backend::Native);
        assert_eq!(s.warnings.len(), 1);
    }

    #[test]
    fn cachalot_conf_applies_on_top() {
        let s = Settings::from_env_with(env(&[
            ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128"),
            ("CACHALOT_ALLOC_CONF", "expandable_segments:True"),
        ]))
        .unwrap();
        assert_eq!(s.conf.max_split_size, 128 << 20);
        assert!(s.conf.expandable_segments);
        let e = Settings::from_env_with(env(&[("PYTORCH_CUDA_ALLOC_CONF", "nope:1")])).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
