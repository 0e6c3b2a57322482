//! The torch release whose decisions `replay`, `compare` and `tune` make: the one asked for
//! (`--torch X.Y`, `torch=`), else the one the first trace's `STEM.device.json` recorded
//! (`cachalot record` and `cachalot capture` write it), else 2.15; and what that release makes
//! of a configuration line: refused where its parser refuses it, a warning where its decision
//! differs from the one cachalot replays for it (`VersionNote::Differs { replayed: false }`),
//! a note where it decides otherwise than 2.15 and the replay does the same; and how a command
//! reports that ([`ReleaseReport`]).

use std::path::Path;

use anyhow::Result;
use cachalot_core::config::{ALLOC_VAR, Settings, TorchVersion, VersionNote};

use crate::Notes;

/// The release a request replays as, and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// The release.
    pub version: TorchVersion,
    /// It was read from the trace's `STEM.device.json` (not asked for).
    pub recorded: bool,
}

/// What a release makes of one configuration line it accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// Decisions of that release the replay does not make (its numbers there are not the
    /// release's).
    pub warnings: Vec<String>,
    /// Decisions that differ from torch 2.15's, replayed as the release makes them.
    pub replayed: Vec<String>,
}

/// A configuration line the release's parser rejects (torch refuses it at its first
/// allocation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The release.
    pub release: TorchVersion,
    /// The line.
    pub conf: String,
    /// What it rejects, and why.
    pub why: Vec<String>,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "torch {} rejects the configuration '{}': {} (`cachalot tune --torch {}` \
             recommends only what it accepts; pass --torch for another release)",
            self.release,
            self.conf,
            self.why.join("; "),
            self.release
        )
    }
}

impl std::error::Error for Rejected {}

/// The release a command replayed as, and what it made of the configurations replayed:
/// what `replay` and `compare` say about it on stderr, in their JSON and in their text.
#[derive(Clone, Debug)]
pub struct ReleaseReport {
    /// The release.
    pub release: Release,
    /// How the release reads the configurations otherwise than 2.15, replayed as it does.
    pub notes: Vec<String>,
    /// What the replays do not make of the release's decisions.
    pub warnings: Vec<String>,
}

impl ReleaseReport {
    /// Nothing noted yet, for `release`.
    pub fn new(release: Release) -> Self {
        ReleaseReport {
            release,
            notes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The notes and warnings, as lines for stderr.
    pub fn announce(&self, notes: Notes) {
        for n in &self.notes {
            notes(format!("note: {n}"));
        }
        for w in &self.warnings {
            notes(format!("warning: {w}"));
        }
    }

    /// `torch` (the release) and, where there are any, `torch_warnings` into a command's JSON.
    pub fn add_json(&self, m: &mut serde_json::Map<String, serde_json::Value>) {
        m.insert("torch".into(), self.release.version.to_string().into());
        if !self.warnings.is_empty() {
            m.insert("torch_warnings".into(), self.warnings.clone().into());
        }
    }

    /// For a release other than 2.15: which release decided, then the notes and warnings; else
    /// nothing.
    pub fn text(&self) -> String {
        if !self.release.is_older() {
            return String::new();
        }
        let mut out = format!(
            "decisions: {}'s, where releases differ\n",
            self.release.describe()
        );
        for n in &self.notes {
            out.push_str(&format!("  {n}\n"));
        }
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }
}

impl Release {
    /// `asked`, else what `first_trace`'s `STEM.device.json` recorded, else 2.15.
    pub fn choose(asked: Option<TorchVersion>, first_trace: Option<&Path>) -> Release {
        let recorded = match asked {
            Some(_) => None,
            None => first_trace.and_then(crate::gpu_dependent::recorded_release),
        };
        Release {
            version: asked.or(recorded).unwrap_or(TorchVersion::NEWEST),
            recorded: recorded.is_some(),
        }
    }

    /// Whether this is another release than the one cachalot's allocator is.
    pub fn is_older(&self) -> bool {
        self.version != TorchVersion::NEWEST
    }

    /// For people: `torch 2.9` and where that came from.
    pub fn describe(&self) -> String {
        let from = if self.recorded {
            " (the release the snapshot was recorded with; --torch to choose another)"
        } else {
            ""
        };
        format!("torch {}{from}", self.version)
    }

    /// `resolved` (torch 2.15's reading of the configuration) as this release reads and
    /// decides it: before 2.9 `PYTORCH_ALLOC_CONF` is not read, a line it rejects is an
    /// error ([`Release::read`]), and the configuration makes its decisions
    /// (`AllocConf::for_torch`); with what it made of them.
    pub fn settle(&self, mut resolved: Settings) -> Result<(Settings, ReleaseReport)> {
        let mut notes = Vec::new();
        let src = &resolved.source;
        let reads_alloc_var = src.generic == Some(ALLOC_VAR) || src.cuda == Some(ALLOC_VAR);
        if reads_alloc_var && !src.pytorch_given && !self.version.reads_alloc_conf_var() {
            let unread = |k: &str| (k != ALLOC_VAR).then(|| std::env::var(k).ok()).flatten();
            resolved = crate::workload::resolve_conf_in(unread, None, None)?;
            notes.push(format!(
                "torch {} does not read {ALLOC_VAR} (2.9 and later do): replayed without it",
                self.version
            ));
        }
        let reading = self.read(&resolved.conf.last_allocator_settings)?;
        notes.extend(reading.replayed);
        resolved.conf = resolved.conf.for_torch(self.version);
        let report = ReleaseReport {
            release: *self,
            notes,
            warnings: reading.warnings,
        };
        Ok((resolved, report))
    }

    /// What this release makes of `conf` (a `PYTORCH_CUDA_ALLOC_CONF` line torch 2.15
    /// accepts): an error quoting it where the release's parser rejects it, else its
    /// [`Reading`].
    pub fn read(&self, conf: &str) -> Result<Reading> {
        let notes = self.version.check(conf);
        let rejected: Vec<String> = notes
            .iter()
            .filter(|n| n.is_rejection())
            .map(|n| n.to_string())
            .collect();
        if !rejected.is_empty() {
            return Err(Rejected {
                release: self.version,
                conf: conf.to_string(),
                why: rejected,
            }
            .into());
        }
        let mut reading = Reading::default();
        for n in &notes {
            if let VersionNote::Differs { replayed, .. } = n {
                if *replayed {
                    reading
                        .replayed
                        .push(format!("replayed as torch {} decides: {n}", self.version));
                } else {
                    reading.warnings.push(format!(
                        "torch {} decides otherwise here and cachalot does not replay it ({n}): \
                         these numbers are not torch {}'s",
                        self.version, self.version
                    ));
                }
            }
        }
        Ok(reading)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Release {
        Release {
            version: s.parse().unwrap(),
            recorded: false,
        }
    }

    #[test]
    fn rejections_quote_the_line_and_say_why() {
        let e = at("2.9")
            .read("per_process_memory_fraction:0.9")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'per_process_memory_fraction:0.9'"), "{e}");
        assert!(e.contains("rejected before torch 2.10"), "{e}");
        assert!(at("2.10").read("per_process_memory_fraction:0.9").is_ok());
        let e = at("2.9")
            .read("max_split_size_mb:20")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 21 MiB"), "{e}");
    }

    #[test]
    fn what_is_not_replayed_is_a_warning() {
        let r = at("2.4")
            .read("expandable_segments:True,max_split_size_mb:64")
            .unwrap();
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        assert!(r.warnings[0].contains("not torch 2.4's"), "{r:?}");
        let r = at("2.9")
            .read("roundup_power2_divisions:[256:1,>:8]")
            .unwrap();
        assert!(r.warnings.is_empty(), "{r:?}");
        assert!(
            r.replayed[0].starts_with("replayed as torch 2.9 decides"),
            "{r:?}"
        );
        assert_eq!(
            at("2.15")
                .read("roundup_power2_divisions:[256:1,>:8]")
                .unwrap(),
            Reading::default()
        );
    }
}
