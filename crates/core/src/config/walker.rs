//! [`Walk`]: one pass over the tokens with torch's index arithmetic (`tokenizer[i]`,
//! `checkIndex`, `checkToken`, `skipKey`, the number readers), plus cachalot's bookkeeping: the
//! warnings it collects and the entries it has seen.

use super::KEYS;
use super::errors::{Fault, HEADER, Warning};
use super::keys::{self, MAX_MB, NumError, stod, stoull};
use super::tokenizer::Tokens;

const JUNK: &str = "torch reads the leading number and ignores the rest";

/// A failure inside one pass, before the variable name is attached.
pub(super) struct Failure {
    pub(super) fault: Fault,
    pub(super) key: usize,
    pub(super) at: usize,
    pub(super) reason: String,
}

pub(super) type R<T> = Result<T, Failure>;

/// Which extra keys a pass accepts.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Mode {
    /// A PyTorch variable: torch's keys plus the legacy `roundup_bypass_threshold_mb`.
    Pytorch,
    /// `CACHALOT_ALLOC_CONF`: also cachalot's own keys.
    Cachalot,
}

pub(super) fn is_known(key: &str, mode: Mode) -> bool {
    keys::lookup(key).is_some_and(|k| !k.cachalot_only || mode == Mode::Cachalot)
}

pub(super) fn is_sep(s: &str) -> bool {
    matches!(s, "," | ":" | "[" | "]")
}

/// (key, entry, variable) of every key the passes parsed, in order.
pub(super) type Seen = Vec<(String, String, &'static str)>;

/// One pass over the tokens: torch's index arithmetic, with cachalot's bookkeeping.
pub(super) struct Walk<'t, 's> {
    pub(super) t: &'t Tokens<'s>,
    pub(super) var: &'static str,
    pub(super) mode: Mode,
    pub(super) key: usize,
    pub(super) warns: Vec<Warning>,
    pub(super) seen: Seen,
}

impl<'t, 's> Walk<'t, 's> {
    pub(super) fn new(t: &'t Tokens<'s>, var: &'static str, mode: Mode) -> Self {
        Walk {
            t,
            var,
            mode,
            key: 0,
            warns: Vec::new(),
            seen: Vec::new(),
        }
    }

    pub(super) fn key_text(&self) -> &'t str {
        self.t.text(self.key)
    }

    /// The input from the current key to the end of token `end` (to the end of the input
    /// when `end` is past the last token).
    pub(super) fn entry(&self, end: usize) -> String {
        let toks = &self.t.toks;
        let Some(first) = toks.get(self.key) else {
            return self.t.src.trim().into();
        };
        let stop = toks
            .get(end)
            .map_or(self.t.src.len(), |t| t.end)
            .max(first.end);
        self.t.src[first.start..stop].trim_end().into()
    }

    pub(super) fn fail(&self, at: usize, fault: Fault, reason: impl Into<String>) -> Failure {
        Failure {
            fault,
            key: self.key,
            at,
            reason: reason.into(),
        }
    }

    /// A `c10::ValueError` with torch's text and cachalot's explanation.
    pub(super) fn reject(
        &self,
        at: usize,
        torch: impl Into<String>,
        reason: impl Into<String>,
    ) -> Failure {
        self.fail(at, Fault::Value(torch.into()), reason)
    }

    pub(super) fn missing(&self, at: usize, line: u32) -> Failure {
        let key = self.key_text();
        let reason = if is_sep(key) {
            format!("stray '{key}': entries are key:value pairs separated by ','")
        } else if key.contains('=') {
            format!(
                "'{key}': use ':' between a key and its value, not '=' (write {})",
                key.replacen('=', ":", 1)
            )
        } else if self.t.src.contains(';') {
            format!(
                "options are separated by ',', not ';' (write {}); use ':' between a key and its \
                 value",
                self.t.src.replace(';', ",")
            )
        } else {
            format!("'{key}' is missing its value: write {key}:<value>")
        };
        self.fail(at, Fault::out_of_bounds(line), reason)
    }

    pub(super) fn warn(
        &mut self,
        end: usize,
        message: impl Into<String>,
        torch_text: Option<String>,
    ) {
        let entry = self.entry(end);
        self.warns.push(Warning {
            torch_text,
            ..Warning::new(self.var, entry, message)
        });
    }

    /// `tokenizer[i]`: out of range → assertion at AllocatorConfig.h:54.
    pub(super) fn get(&self, i: usize) -> R<&'t str> {
        if i < self.t.len() {
            Ok(self.t.text(i))
        } else {
            Err(self.missing(i, 54))
        }
    }

    /// `checkIndex(i)`: out of range → assertion at AllocatorConfig.h:123.
    pub(super) fn index(&self, i: usize) -> R<&'t str> {
        if i < self.t.len() {
            Ok(self.t.text(i))
        } else {
            Err(self.missing(i, 123))
        }
    }

    /// `checkToken(i, tok)`, whose result torch ignores for separators: a mismatch is read on
    /// by position, so cachalot warns.
    pub(super) fn sep(&mut self, i: usize, tok: &str) -> R<()> {
        let found = self.index(i)?;
        if found != tok {
            let key = self.key_text();
            let (what, then) = match tok {
                ":" => (
                    format!("':' after '{key}'"),
                    "takes the next token as the value",
                ),
                _ => (format!("',' after the value of '{key}'"), "skips it"),
            };
            let msg = format!(
                "expected {what} but found '{found}'; torch 2.15 does not check separators and \
                 {then}"
            );
            self.warn(i, msg, None);
        }
        Ok(())
    }

    /// `toSizeT(i)` = `std::stoull`.
    pub(super) fn size_t(&mut self, i: usize) -> R<u64> {
        let (tok, key) = (self.index(i)?, self.key_text());
        match stoull(tok) {
            Ok((v, used, neg)) => {
                if neg && v != 0 {
                    self.warn(
                        i,
                        format!("'{tok}' was read as {v}: std::stoull wraps negative numbers"),
                        None,
                    );
                } else if used < tok.len() {
                    self.warn(i, format!("'{tok}' was read as {v}: {JUNK}"), None);
                }
                Ok(v)
            }
            Err(e) => {
                let why = match e {
                    NumError::OutOfRange => {
                        format!("'{tok}' is too large for {key} (at most {})", u64::MAX)
                    }
                    NumError::Invalid => format!("{key} needs a whole number, got '{tok}'"),
                };
                Err(self.fail(i, Fault::number(e, "stoull"), why))
            }
        }
    }

    /// `toDouble(i)` = `std::stod`.
    pub(super) fn double(&mut self, i: usize) -> R<f64> {
        let (tok, key) = (self.index(i)?, self.key_text());
        match stod(tok) {
            Ok((v, used)) => {
                if used < tok.len() {
                    self.warn(i, format!("'{tok}' was read as {v}: {JUNK}"), None);
                }
                Ok(v)
            }
            Err(e) => {
                let why = match e {
                    NumError::OutOfRange => format!(
                        "'{tok}' is out of range for {key} (torch rejects overflowing and \
                         subnormal numbers)"
                    ),
                    NumError::Invalid => format!("{key} needs a number, got '{tok}'"),
                };
                Err(self.fail(i, Fault::number(e, "stod"), why))
            }
        }
    }

    /// `toBool(i)`: exactly `True` or `False`.
    pub(super) fn boolean(&self, i: usize) -> R<bool> {
        match self.index(i)? {
            "True" => Ok(true),
            "False" => Ok(false),
            tok => Err(self.reject(
                i,
                format!(
                    "Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{tok}'"
                ),
                format!(
                    "{} must be True or False (capitalised), got '{tok}'",
                    self.key_text()
                ),
            )),
        }
    }

    /// `skipKey(i)`: past `:` and one value token, or to the `]` closing a list.
    pub(super) fn skip_key(&self, i: usize) -> R<usize> {
        self.index(i + 1)?;
        if self.index(i + 2)? != "[" {
            return Ok(i + 2);
        }
        let n = self.t.len();
        match (i + 3..n).find(|j| self.t.text(*j) == "]") {
            Some(j) => Ok(j),
            None => {
                let fault = Fault::unclosed("i < config_.size()", HEADER, 114);
                Err(self.fail(
                    n,
                    fault,
                    format!("the list of '{}' has no closing ']'", self.key_text()),
                ))
            }
        }
    }

    /// `key : value` for a boolean; returns the value's index.
    pub(super) fn bool_entry(&mut self, i: usize, slot: &mut bool) -> R<usize> {
        self.sep(i + 1, ":")?;
        *slot = self.boolean(i + 2)?;
        Ok(i + 2)
    }

    /// `key : value` for a whole number; returns the number.
    pub(super) fn size_entry(&mut self, i: usize) -> R<u64> {
        self.sep(i + 1, ":")?;
        self.size_t(i + 2)
    }

    /// `key : value` for a size in MiB, clamped to [`MAX_MB`] as torch does; returns the MiB.
    pub(super) fn mib_entry(&mut self, i: usize) -> R<u64> {
        let v = self.size_entry(i)?;
        self.clamp_mib(i + 2, v)
    }

    pub(super) fn clamp_mib(&mut self, at: usize, v: u64) -> R<u64> {
        if v > MAX_MB {
            self.warn(
                at,
                format!("{v} MiB is more than torch keeps; clamped to {MAX_MB} MiB"),
                None,
            );
        }
        Ok(v.min(MAX_MB))
    }

    /// After a key's value: records the entry and consumes the separator torch expects.
    pub(super) fn next(&mut self, i: usize, owner: bool) -> R<usize> {
        if owner {
            let (key, entry) = (self.key_text().to_string(), self.entry(i));
            if self.seen.iter().any(|(k, _, _)| *k == key) {
                let how = match key.as_str() {
                    "roundup_power2_divisions" => "torch applies each on top of the previous ones",
                    _ => "the last one wins",
                };
                self.warn(i, format!("'{key}' is given more than once; {how}"), None);
            }
            self.seen.push((key, entry, self.var));
        }
        if i + 1 < self.t.len() {
            self.sep(i + 1, ",")?;
            return Ok(i + 2);
        }
        Ok(i + 1)
    }
}

pub(super) fn unknown_key(w: &Walk, i: usize, which: &str) -> Failure {
    let key = w.t.text(i);
    let torch = format!("Unrecognized key '{key}' in {which} allocator config.");
    let reason = if is_sep(key) {
        format!("stray '{key}': entries are key:value pairs separated by ','")
    } else if keys::is_cachalot_key(key) {
        format!("'{key}' is a cachalot key: set it in CACHALOT_ALLOC_CONF")
    } else {
        let valid: Vec<&str> = KEYS
            .iter()
            .filter(|k| w.mode == Mode::Cachalot || !k.cachalot_only)
            .map(|k| k.name)
            .collect();
        let mb = format!("{key}_mb");
        let hint = if valid.contains(&mb.as_str()) {
            format!(" (did you mean {mb}?)")
        } else {
            String::new()
        };
        format!(
            "unknown key '{key}'{hint}; valid keys: {}",
            valid.join(", ")
        )
    };
    let end = if is_sep(key) {
        i
    } else {
        (i + 2).min(w.t.len() - 1)
    };
    w.reject(end, torch, reason)
}
