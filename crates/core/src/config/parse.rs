//! Reading `PYTORCH_CUDA_ALLOC_CONF` exactly as torch 2.15 does, and cachalot's
//! `CACHALOT_ALLOC_CONF` on top of it.
//!
//! torch 2.15 reads one string three times, and this module repeats all three passes, because
//! they disagree on odd input and the first one to fail decides the error:
//!
//! 1. **load time** (`libc10_cuda.so` static initialiser): walks `key : value ,` triples looking
//!    for `backend`. Anything it trips over aborts the process (`terminate called ...`).
//! 2. **CUDA pass** (`CUDAAllocatorConfig::parseArgs`): owns `backend`, `release_lock_*`,
//!    `per_process_memory_fraction`, `throw_on_cudamalloc_oom`, `expandable_segments_reserve*`,
//!    `graph_capture_*` and the `pinned_*` keys except the three below; rejects unknown keys.
//! 3. **generic pass** (`AcceleratorAllocatorConfig::parseArgs`): owns `max_split_size_mb`,
//!    `max_non_split_rounding_mb`, `large_segment_size_mb` (read first, from any position),
//!    `roundup_power2_divisions`, `garbage_collection_threshold`, `expandable_segments`,
//!    `pinned_use_background_threads`, `pinned_max_round_threshold_mb`, `pinned_max_cached_size_mb`.
//!
//! Each pass skips the other's keys with `skipKey` (one token, or a whole `[...]` list). With the
//! native backend the CUDA pass runs before the generic one; with `backend:cudaMallocAsync` the
//! generic pass runs first (that is the order the oracle shows).
//!
//! Findings from the oracle (`shared/oracle`, torch 2.15.0; fields it does not print were read
//! with a C++ probe linked against the same libraries). About 20 000 generated strings were
//! compared with the oracle (acceptance, every `config_effective` field, exception type, message,
//! torch's warnings, and that `to_pytorch_string` reads back the same) with no difference left.
//!
//! | topic | spec (§1, §17.4) | oracle |
//! |---|---|---|
//! | env precedence | main-2026: CUDA → HIP → ALLOC, first set wins | generic pass: CUDA → HIP → ALLOC; CUDA pass and load-time backend: CUDA → ALLOC (HIP is ignored there on a CUDA build). An empty value counts as set |
//! | error order | not stated | load time, then CUDA pass, then generic pass; generic first with `cudaMallocAsync`, whose unknown-key text is "... in Accelerator allocator config." |
//! | missing value (`max_split_size_mb:`) | INTERNAL ASSERT "Index out of bounds" | the load-time scan hits it first: the process aborts (`terminate`, exit 134) |
//! | unclosed `[` | "Expected closing bracket" | same text, from `skipKey` at load time (abort) |
//! | whitespace | all `isspace` dropped | also *inside* words: `1 00` = 100; `a:1 b:2` glues `1b` and aborts |
//! | `max_split_size_mb` bound | `>= 20` | `>= large_segment_size_mb`; clamped to 17592186044415 MiB, so `-1` (wraps) = 18446744073708503040 B |
//! | `large_segment_size_mb` | `> 10`, parsed first | read from *any* token position, even inside another key's list (last one wins); resets `max_non_split_rounding_mb` to it |
//! | `max_non_split_rounding_mb` | `>= 20` | `>= large_segment_size_mb` |
//! | pinned keys | `pinned_max_*` only named | `pinned_max_round_threshold_mb`, `pinned_max_cached_size_mb`, `pinned_free_catch_all` are keys, unbounded; torch warns when round > cached |
//! | `expandable_segments_reserve` | fraction or `<n>G` | the whole token as a decimal (no hex, `inf`, `nan`; subnormal ok), > 0; a bad value only warns and keeps the old one; `[` is taken as the value |
//! | `..._reserve_by_class` | list | each occurrence replaces the map; a repeated class takes the later value |
//! | cudaMallocAsync warning | any non-backend key | only CUDA-pass keys trigger it (`max_split_size_mb` does not) |
//! | two `backend` entries | not stated | different values: "parsed at runtime != ... at load time" assertion |
//! | roundup list checks | not stated | the division is checked before the key: `[abc:3]` reports the division |
//! | GC and fraction 1.0 | ≈2.10+: 1.0 = no limit | confirmed: GC stays off at 1.0, runs at 0.9999999999 |
//! | `stod` | prefix parse | also hex floats and `inf`/`nan`; `out_of_range` on overflow and on results tiny after rounding (`2.2250738585072012e-308` rejected, `...13e-308` accepted, exact `0x1p-1074` accepted) |
//!
//! One known gap: a decimal that is *exactly* a subnormal (hundreds of digits) is treated as
//! inexact, so rejected where glibc would accept it.

use std::fmt;

use super::keys::{
    CACHALOT_KEYS, CUDA_KEYS, GENERIC_KEYS, LEGACY_KEY, MAX_MB, NumError, c_isspace,
    divisions_value, reserve_spec, stod, stoull,
};
use super::{AllocConf, Backend, MIB, ReserveSpec};

const CUDA_VAR: &str = "PYTORCH_CUDA_ALLOC_CONF";
const HIP_VAR: &str = "PYTORCH_HIP_ALLOC_CONF";
const ALLOC_VAR: &str = "PYTORCH_ALLOC_CONF";
const CACHALOT_VAR: &str = "CACHALOT_ALLOC_CONF";
const HEADER: &str = "/__w/pytorch/pytorch/c10/core/AllocatorConfig.h";
const ASYNC_WARNING: &str = "backend:cudaMallocAsync ignores max_split_size_mb,\
roundup_power2_divisions, and garbage_collect_threshold.";
const JUNK: &str = "torch reads the leading number and ignores the rest";

/// What torch 2.15 throws.
#[derive(Clone, Debug, PartialEq)]
enum Fault {
    /// `TORCH_INTERNAL_ASSERT` → `c10::Error`.
    Assert {
        cond: &'static str,
        file: &'static str,
        line: u32,
        msg: String,
    },
    /// `TORCH_CHECK_VALUE` → `c10::ValueError`.
    Value(String),
    /// `std::invalid_argument` from `std::stoull` / `std::stod` (what() = the function name).
    InvalidArgument(&'static str),
    /// `std::out_of_range` from the same.
    OutOfRange(&'static str),
}

impl Fault {
    fn out_of_bounds(line: u32) -> Fault {
        let msg = "Index out of bounds in ConfigTokenizer".into();
        Fault::Assert {
            cond: "i < config_.size()",
            file: HEADER,
            line,
            msg,
        }
    }

    fn unclosed(cond: &'static str, file: &'static str, line: u32) -> Fault {
        let msg = "Expected closing bracket ']' in ConfigTokenizer but reached end of config";
        Fault::Assert {
            cond,
            file,
            line,
            msg: msg.into(),
        }
    }

    fn number(e: NumError, function: &'static str) -> Fault {
        match e {
            NumError::Invalid => Fault::InvalidArgument(function),
            NumError::OutOfRange => Fault::OutOfRange(function),
        }
    }
}

/// A configuration string torch 2.15 would reject (or, for cachalot's own checks, an
/// inconsistent `CACHALOT_ALLOC_CONF`). `Display` quotes the entry and says what is valid.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("error in {var} entry '{entry}': {reason}")]
pub struct ConfigError {
    /// The variable the string came from (`PYTORCH_CUDA_ALLOC_CONF` for [`parse_pytorch`]).
    pub var: &'static str,
    /// The offending entry as written (`max_split_size_mb:10`).
    pub entry: String,
    /// What is wrong, and what would be valid.
    pub reason: String,
    fault: Box<Fault>,
    at_load: bool,
}

impl ConfigError {
    /// The exact text torch 2.15 raises for this string (what the oracle prints on stderr),
    /// e.g. `Unrecognized key 'no_such_key' in CUDA allocator config.`.
    pub fn torch_message(&self) -> String {
        match self.fault.as_ref() {
            Fault::Assert {
                cond,
                file,
                line,
                msg,
            } => format!(
                "{cond} INTERNAL ASSERT FAILED at \"{file}\":{line}, please report a bug to \
                 PyTorch. {msg}"
            ),
            Fault::Value(m) => m.clone(),
            Fault::InvalidArgument(f) | Fault::OutOfRange(f) => (*f).to_string(),
        }
    }

    /// The C++ exception type torch 2.15 throws (`c10::ValueError`, `c10::Error`,
    /// `std::invalid_argument` or `std::out_of_range`).
    pub fn torch_exception(&self) -> &'static str {
        match *self.fault {
            Fault::Assert { .. } => "c10::Error",
            Fault::Value(_) => "c10::ValueError",
            Fault::InvalidArgument(_) => "std::invalid_argument",
            Fault::OutOfRange(_) => "std::out_of_range",
        }
    }

    /// True when torch fails while `libc10_cuda.so` loads (its backend scan): the process is
    /// aborted (`terminate called ...`) instead of raising a Python exception.
    pub fn aborts_at_load(&self) -> bool {
        self.at_load
    }
}

/// Something torch 2.15 accepts but that is probably not what was meant, or that torch itself
/// warns about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The variable the entry came from.
    pub var: &'static str,
    /// The entry as written (may be empty for whole-configuration remarks).
    pub entry: String,
    /// How the entry was read, and what to write instead.
    pub message: String,
    /// The warning torch 2.15 itself prints, if it prints one.
    pub torch_text: Option<String>,
}

impl Warning {
    fn new(var: &'static str, entry: impl Into<String>, message: impl Into<String>) -> Self {
        Warning {
            var,
            entry: entry.into(),
            message: message.into(),
            torch_text: None,
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.entry.as_str() {
            "" => write!(f, "{}: {}", self.var, self.message),
            e => write!(f, "{} entry '{e}': {}", self.var, self.message),
        }
    }
}

/// Which environment variables [`from_env`] read.
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
        if self.cachalot {
            parts.push(CACHALOT_VAR.into());
        }
        match parts.is_empty() {
            true => f.write_str("defaults (no allocator variable set)")?,
            false => f.write_str(&parts.join(" + "))?,
        }
        if !self.ignored.is_empty() {
            write!(f, "; ignored: {}", self.ignored.join(", "))?;
        }
        Ok(())
    }
}

/// One token of torch's `ConfigTokenizer`, with where it sits in the input.
struct Tok {
    text: String,
    start: usize,
    end: usize,
    /// Whitespace inside the token was dropped (`1 00` became `100`).
    squeezed: bool,
}

/// `c10::CachingAllocator::ConfigTokenizer`: `,` `:` `[` `]` are tokens of their own, C-locale
/// whitespace is dropped, everything else accumulates into words.
struct Tokens<'s> {
    src: &'s str,
    toks: Vec<Tok>,
}

impl<'s> Tokens<'s> {
    fn new(src: &'s str) -> Self {
        let (mut toks, mut word, mut gap) = (Vec::new(), None::<Tok>, false);
        for (pos, ch) in src.char_indices() {
            if matches!(ch, ',' | ':' | '[' | ']') {
                toks.extend(word.take());
                let text = ch.to_string();
                toks.push(Tok {
                    text,
                    start: pos,
                    end: pos + 1,
                    squeezed: false,
                });
            } else if c_isspace(ch) {
                gap = word.is_some();
                continue;
            } else {
                let new = || Tok {
                    text: String::new(),
                    start: pos,
                    end: pos,
                    squeezed: false,
                };
                let w = word.get_or_insert_with(new);
                w.squeezed |= gap;
                w.text.push(ch);
                w.end = pos + ch.len_utf8();
            }
            gap = false;
        }
        toks.extend(word);
        Tokens { src, toks }
    }

    fn len(&self) -> usize {
        self.toks.len()
    }

    /// The text of token `i`, or "" past the end (callers check bounds first).
    fn text(&self, i: usize) -> &str {
        self.toks.get(i).map_or("", |t| t.text.as_str())
    }
}

/// A failure inside one pass, before the variable name is attached.
struct Failure {
    fault: Fault,
    key: usize,
    at: usize,
    reason: String,
}

type R<T> = Result<T, Failure>;

/// Which extra keys a pass accepts.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// A PyTorch variable: torch's keys plus the legacy `roundup_bypass_threshold_mb`.
    Pytorch,
    /// `CACHALOT_ALLOC_CONF`: also cachalot's own keys.
    Cachalot,
}

fn is_known(key: &str, mode: Mode) -> bool {
    GENERIC_KEYS.contains(&key)
        || CUDA_KEYS.contains(&key)
        || key == LEGACY_KEY
        || (mode == Mode::Cachalot && CACHALOT_KEYS.contains(&key))
}

fn is_sep(s: &str) -> bool {
    matches!(s, "," | ":" | "[" | "]")
}

/// (key, entry, variable) of every key the passes parsed, in order.
type Seen = Vec<(String, String, &'static str)>;

/// One pass over the tokens: torch's index arithmetic, with cachalot's bookkeeping.
struct Walk<'t, 's> {
    t: &'t Tokens<'s>,
    var: &'static str,
    mode: Mode,
    key: usize,
    warns: Vec<Warning>,
    seen: Seen,
}

impl<'t, 's> Walk<'t, 's> {
    fn new(t: &'t Tokens<'s>, var: &'static str, mode: Mode) -> Self {
        Walk {
            t,
            var,
            mode,
            key: 0,
            warns: Vec::new(),
            seen: Vec::new(),
        }
    }

    fn key_text(&self) -> &'t str {
        self.t.text(self.key)
    }

    /// The input from the current key to the end of token `end` (to the end of the input
    /// when `end` is past the last token).
    fn entry(&self, end: usize) -> String {
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

    fn fail(&self, at: usize, fault: Fault, reason: impl Into<String>) -> Failure {
        Failure {
            fault,
            key: self.key,
            at,
            reason: reason.into(),
        }
    }

    /// A `c10::ValueError` with torch's text and cachalot's explanation.
    fn reject(&self, at: usize, torch: impl Into<String>, reason: impl Into<String>) -> Failure {
        self.fail(at, Fault::Value(torch.into()), reason)
    }

    fn missing(&self, at: usize, line: u32) -> Failure {
        let key = self.key_text();
        let reason = match is_sep(key) {
            true => format!("stray '{key}': entries are key:value pairs separated by ','"),
            false => format!("'{key}' is missing its value: write {key}:<value>"),
        };
        self.fail(at, Fault::out_of_bounds(line), reason)
    }

    fn warn(&mut self, end: usize, message: impl Into<String>, torch_text: Option<String>) {
        let entry = self.entry(end);
        self.warns.push(Warning {
            torch_text,
            ..Warning::new(self.var, entry, message)
        });
    }

    /// `tokenizer[i]`: out of range → assertion at AllocatorConfig.h:54.
    fn get(&self, i: usize) -> R<&'t str> {
        if i < self.t.len() {
            Ok(self.t.text(i))
        } else {
            Err(self.missing(i, 54))
        }
    }

    /// `checkIndex(i)`: out of range → assertion at AllocatorConfig.h:123.
    fn index(&self, i: usize) -> R<&'t str> {
        if i < self.t.len() {
            Ok(self.t.text(i))
        } else {
            Err(self.missing(i, 123))
        }
    }

    /// `checkToken(i, tok)`, whose result torch ignores for separators: a mismatch is read on
    /// by position, so cachalot warns.
    fn sep(&mut self, i: usize, tok: &str) -> R<()> {
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
    fn size_t(&mut self, i: usize) -> R<u64> {
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
    fn double(&mut self, i: usize) -> R<f64> {
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
    fn boolean(&self, i: usize) -> R<bool> {
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
    fn skip_key(&self, i: usize) -> R<usize> {
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
    fn bool_entry(&mut self, i: usize, slot: &mut bool) -> R<usize> {
        self.sep(i + 1, ":")?;
        *slot = self.boolean(i + 2)?;
        Ok(i + 2)
    }

    /// `key : value` for a whole number; returns the number.
    fn size_entry(&mut self, i: usize) -> R<u64> {
        self.sep(i + 1, ":")?;
        self.size_t(i + 2)
    }

    /// `key : value` for a size in MiB, clamped to [`MAX_MB`] as torch does; returns the MiB.
    fn mib_entry(&mut self, i: usize) -> R<u64> {
        let v = self.size_entry(i)?;
        self.clamp_mib(i + 2, v)
    }

    fn clamp_mib(&mut self, at: usize, v: u64) -> R<u64> {
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
    fn next(&mut self, i: usize, owner: bool) -> R<usize> {
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

/// The load-time backend scan. `Some` when a `backend` key was found.
fn load_time(w: &mut Walk) -> R<Option<Backend>> {
    let mut i = 0;
    while i < w.t.len() {
        w.key = i;
        if w.t.text(i) == "backend" {
            w.index(i + 1)?;
            let async_ = w.get(i + 2)? == "cudaMallocAsync";
            return Ok(Some(if async_ {
                Backend::CudaMallocAsync
            } else {
                Backend::Native
            }));
        }
        i = w.skip_key(i)? + 2;
    }
    Ok(None)
}

/// The CUDA pass (`CUDAAllocatorConfig::parseArgs`).
fn cuda_pass(w: &mut Walk, c: &mut AllocConf, load: Backend) -> R<()> {
    let (mut used_async, mut native_specific, mut i) = (false, false, 0);
    while i < w.t.len() {
        w.key = i;
        let key = w.t.text(i);
        let owner = CUDA_KEYS.contains(&key);
        native_specific |= owner && key != "backend";
        i = match key {
            "backend" => {
                w.sep(i + 1, ":")?;
                let v = w.get(i + 2)?;
                if v != "native" && v != "cudaMallocAsync" {
                    let torch = "Unknown allocator backend, options are native and cudaMallocAsync";
                    let why = format!("backend must be native or cudaMallocAsync, got '{v}'");
                    return Err(w.reject(i + 2, torch, why));
                }
                used_async = v == "cudaMallocAsync";
                if v != load.name() {
                    let msg = format!(
                        "Allocator backend parsed at runtime != allocator backend parsed at load \
                         time, {v} != {}",
                        load.name()
                    );
                    let file = "/__w/pytorch/pytorch/c10/cuda/CUDAAllocatorConfig.cpp";
                    let cond = "tokenizer[i] == get()->name()";
                    let f = Fault::Assert {
                        cond,
                        file,
                        line: 64,
                        msg,
                    };
                    let why = format!(
                        "backend is given twice with different values: torch picks '{}' from the \
                         first one when it loads, then rejects '{v}'",
                        load.name()
                    );
                    return Err(w.fail(i + 2, f, why));
                }
                i + 2
            }
            "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => {
                w.bool_entry(i, &mut c.release_lock_on_cudamalloc)?
            }
            "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => {
                w.bool_entry(i, &mut c.pinned_use_cuda_host_register)?
            }
            "graph_capture_record_stream_reuse" => {
                w.bool_entry(i, &mut c.graph_capture_record_stream_reuse)?
            }
            "pinned_free_catch_all" => w.bool_entry(i, &mut c.pinned_free_catch_all)?,
            "throw_on_cudamalloc_oom" => w.bool_entry(i, &mut c.throw_on_cudamalloc_oom)?,
            "pinned_num_register_threads" => {
                let v = w.size_entry(i)?;
                let why = format!("{key} must be a power of two no greater than 128, got {v}");
                if !v.is_power_of_two() {
                    let torch = format!("Number of register threads has to be power of 2, got {v}");
                    return Err(w.reject(i + 2, torch, why));
                }
                if v > 128 {
                    let torch = format!(
                        "Number of register threads should be less than or equal to 128, got {v}"
                    );
                    return Err(w.reject(i + 2, torch, why));
                }
                c.pinned_num_register_threads = v;
                i + 2
            }
            "pinned_reserve_segment_size_mb" => {
                let v = w.size_entry(i)?;
                if v == 0 {
                    let torch = "Pinned reserve segment size has to be greater than 0";
                    return Err(w.reject(i + 2, torch, format!("{key} must be greater than 0")));
                }
                c.pinned_reserve_segment_size_mb = v;
                i + 2
            }
            "per_process_memory_fraction" => {
                w.sep(i + 1, ":")?;
                let v = w.double(i + 2)?;
                if !(0.0..=1.0).contains(&v) {
                    let torch = "per_process_memory_fraction is invalid, set it in [0.0, 1.0]";
                    let why = format!("{key} must be in [0, 1], got '{}'", w.t.text(i + 2));
                    return Err(w.reject(i + 2, torch, why));
                }
                c.per_process_memory_fraction = v;
                i + 2
            }
            "expandable_segments_reserve" => {
                w.sep(i + 1, ":")?;
                let tok = w.get(i + 2)?;
                if let Some(s) = reserve_value(w, i + 2, tok) {
                    c.expandable_segments_reserve = Some(s);
                }
                i + 2
            }
            "expandable_segments_reserve_by_class" => reserve_by_class(w, c, i)?,
            _ if !is_known(key, w.mode) => return Err(unknown_key(w, i, "CUDA")),
            _ => w.skip_key(i)?,
        };
        i = w.next(i, owner)?;
    }
    if used_async && native_specific {
        let msg = "torch prints this whenever a CUDA-specific key (release_lock_on_cudamalloc, \
                   per_process_memory_fraction, pinned_*, ...) is combined with \
                   backend:cudaMallocAsync; the keys it names are not checked";
        let warning = Warning::new(w.var, "", msg);
        w.warns.push(Warning {
            torch_text: Some(ASYNC_WARNING.into()),
            ..warning
        });
    }
    Ok(())
}

/// Reads an expandable-segment reserve, warning as torch does when it is invalid (torch then
/// keeps the previous value) and when it is too small to be usable.
fn reserve_value(w: &mut Walk, i: usize, tok: &str) -> Option<ReserveSpec> {
    let Some(spec) = reserve_spec(tok) else {
        let torch = format!(
            "Ignoring invalid expandable-segment reserve value '{tok}' in PYTORCH_CUDA_ALLOC_CONF \
             (expected a positive, finite fraction like 0.5 or an absolute size like 40G); using \
             default."
        );
        let msg = format!(
            "'{tok}' is not a positive fraction (0.5) or size in GiB (40G); torch ignores it and \
             keeps the previous reserve"
        );
        w.warn(i, msg, Some(torch));
        return None;
    };
    let tiny = match spec {
        ReserveSpec::Fraction(f) => f < 1.0 / 4096.0,
        ReserveSpec::GiB(g) => g < 20.0 / 1024.0,
    };
    if tiny {
        let msg = "this reserve is smaller than one 20 MiB page (for a fraction: on an 80 GiB \
                   device); torch accepts it, then fails every expandable-segment allocation";
        w.warn(i, msg, None);
    }
    Some(spec)
}

/// `expandable_segments_reserve_by_class:[class:reserve,...]`; returns the index of `]`.
fn reserve_by_class(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    w.sep(i + 1, ":")?;
    let mut i = i + 2;
    if w.index(i)? != "[" {
        w.warn(
            i,
            "expected '[' to open the list; torch reads on by position",
            None,
        );
    }
    let by = &mut c.expandable_segments_reserve_by_class;
    by.clear();
    i += 1;
    while w.index(i)? != "]" {
        let name = w.t.text(i).to_string();
        w.sep(i + 1, ":")?;
        i += 2;
        let tok = w.get(i)?;
        if let Some(s) = reserve_value(w, i, tok) {
            match by.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = s,
                None => by.push((name, s)),
            }
        }
        i += 1;
        if w.index(i)? == "," {
            i += 1;
        }
    }
    Ok(i)
}

fn unknown_key(w: &Walk, i: usize, which: &str) -> Failure {
    let key = w.t.text(i);
    let torch = format!("Unrecognized key '{key}' in {which} allocator config.");
    let reason = if is_sep(key) {
        format!("stray '{key}': entries are key:value pairs separated by ','")
    } else if CACHALOT_KEYS.contains(&key) {
        format!("'{key}' is a cachalot key: set it in CACHALOT_ALLOC_CONF")
    } else {
        let mut valid: Vec<&str> = super::KEYS.iter().map(|k| k.name).collect();
        valid.retain(|k| w.mode == Mode::Cachalot || !CACHALOT_KEYS.contains(k));
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

/// `large_segment_size_mb : value`; returns the value's index.
fn large_segment(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    let v = w.mib_entry(i)?;
    if v <= 10 {
        let torch = "CachingAllocator option large_segment_size_mb must be > 10 MB";
        return Err(w.reject(
            i + 2,
            torch,
            "large_segment_size_mb must be greater than 10 (MiB)",
        ));
    }
    c.large_segment_size = v * MIB;
    Ok(i + 2)
}

/// `max_split_size_mb` / `max_non_split_rounding_mb`: at least `large_segment_size_mb`; bytes.
fn bounded_mib(w: &mut Walk, c: &AllocConf, i: usize) -> R<u64> {
    let (key, v) = (w.key_text(), w.size_entry(i)?);
    let min = c.large_segment_size / MIB;
    if v < min {
        let torch = format!("CachingAllocator option {key} too small, must be >= {min}");
        let of = if min == 20 {
            ""
        } else {
            " (= large_segment_size_mb)"
        };
        return Err(w.reject(
            i + 2,
            torch,
            format!("{key} must be at least {min}{of} (MiB)"),
        ));
    }
    Ok(w.clamp_mib(i + 2, v)? * MIB)
}

/// The generic pass (`AcceleratorAllocatorConfig::parseArgs`). `reset` = torch's behaviour of
/// resetting the options it owns at every parse; `false` for `CACHALOT_ALLOC_CONF` on top.
fn generic_pass(w: &mut Walk, c: &mut AllocConf, reset: bool) -> R<()> {
    if reset {
        c.max_split_size = u64::MAX;
        c.roundup_power2_divisions = [0; 16];
        c.garbage_collection_threshold = 0.0;
        c.large_segment_size = 20 * MIB;
    }
    let mut named_large = false;
    for i in 0..w.t.len() {
        if w.t.text(i) == "large_segment_size_mb" {
            w.key = i;
            large_segment(w, c, i)?;
            named_large = true;
        }
    }
    if reset || named_large {
        c.max_non_split_rounding_size = c.large_segment_size;
    }
    let mut i = 0;
    while i < w.t.len() {
        w.key = i;
        let key = w.t.text(i);
        let owner =
            GENERIC_KEYS.contains(&key) || key == LEGACY_KEY || CACHALOT_KEYS.contains(&key);
        let cachalot = w.mode == Mode::Cachalot;
        i = match key {
            // Read by the pre-pass above; the main loop only steps over it.
            "large_segment_size_mb" => w.skip_key(i)?,
            "max_split_size_mb" => {
                c.max_split_size = bounded_mib(w, c, i)?;
                i + 2
            }
            "max_non_split_rounding_mb" => {
                c.max_non_split_rounding_size = bounded_mib(w, c, i)?;
                i + 2
            }
            "garbage_collection_threshold" => {
                w.sep(i + 1, ":")?;
                let v = w.double(i + 2)?;
                if !(v > 0.0 && v < 1.0) {
                    let torch = "garbage_collect_threshold is invalid, set it in (0.0, 1.0)";
                    let why = format!(
                        "{key} must be strictly between 0 and 1, got '{}'",
                        w.t.text(i + 2)
                    );
                    return Err(w.reject(i + 2, torch, why));
                }
                c.garbage_collection_threshold = v;
                i + 2
            }
            "roundup_power2_divisions" => roundup(w, c, i)?,
            "expandable_segments" => w.bool_entry(i, &mut c.expandable_segments)?,
            "pinned_use_background_threads" => {
                w.bool_entry(i, &mut c.pinned_use_background_threads)?
            }
            "pinned_max_round_threshold_mb" => {
                c.pinned_max_round_threshold = w.mib_entry(i)? * MIB;
                i + 2
            }
            "pinned_max_cached_size_mb" => {
                c.pinned_max_cached_size = w.mib_entry(i)? * MIB;
                i + 2
            }
            LEGACY_KEY => {
                c.roundup_bypass_threshold = w.mib_entry(i)? * MIB;
                i + 2
            }
            "expandable_oversize_exempt" if cachalot => {
                w.bool_entry(i, &mut c.cachalot.expandable_oversize_exempt)?
            }
            "research_after_flush" if cachalot => {
                w.bool_entry(i, &mut c.cachalot.research_after_flush)?
            }
            _ if !is_known(key, w.mode) => return Err(unknown_key(w, i, "Accelerator")),
            _ => w.skip_key(i)?,
        };
        i = w.next(i, owner)?;
    }
    let (round, cached) = (c.pinned_max_round_threshold, c.pinned_max_cached_size);
    if round != u64::MAX && cached != u64::MAX && round > cached {
        let torch = format!(
            "pinned_max_round_threshold_mb ({}) > pinned_max_cached_size_mb ({}). The cache size \
             limit takes precedence: allocations above pinned_max_cached_size_mb are never \
             rounded up.",
            round / MIB,
            cached / MIB
        );
        let warning = Warning::new(w.var, "", torch.clone());
        w.warns.push(Warning {
            torch_text: Some(torch),
            ..warning
        });
    }
    Ok(())
}

/// `roundup_power2_divisions : N` or `: [MiB:N, ..., >:N]`; returns the last index used.
fn roundup(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    w.sep(i + 1, ":")?;
    let mut i = i + 2;
    let divs = &mut c.roundup_power2_divisions;
    if w.get(i)? != "[" {
        let v = w.size_t(i)?;
        if !v.is_power_of_two() {
            let torch = "For roundups, the divisions has to be power of 2 ";
            let why = format!(
                "roundup_power2_divisions must be a power of two (1, 2, 4, 8, ...) or a \
                 [MiB:N,...,>:N] list, got {v}"
            );
            return Err(w.reject(i, torch, why));
        }
        *divs = [v; 16];
        return Ok(i);
    }
    let (mut first, mut last_index, mut touched) = (true, 0usize, [false; 16]);
    loop {
        i += 1;
        if i >= w.t.len() || w.t.text(i) == "]" {
            break;
        }
        let key_at = i;
        w.sep(i + 1, ":")?;
        i += 2;
        let v = w.size_t(i)?;
        if v != 0 && !v.is_power_of_two() {
            let torch = "For roundups, the divisions has to be power of 2 or 0 to disable roundup ";
            let why = format!(
                "roundup_power2_divisions list values must be 0 or a power of two, got {v}"
            );
            return Err(w.reject(i, torch, why));
        }
        if w.t.text(key_at) == ">" {
            if first {
                let msg = "'>' before any interval fills from the 2 MiB interval up: requests \
                           below 2 MiB keep slot 0 (0 = no rounding)";
                w.warn(i, msg, None);
            }
            divs[last_index + 1..].fill(v);
            touched[last_index + 1..].fill(true);
        } else {
            let boundary = w.size_t(key_at)?;
            if !boundary.is_power_of_two() {
                let torch = "For roundups, the intervals have to be power of 2 ";
                let why = format!(
                    "roundup_power2_divisions list keys must be powers of two (MiB) or '>', got '{}'",
                    w.t.text(key_at)
                );
                return Err(w.reject(i, torch, why));
            }
            let index = (63 - boundary.leading_zeros() as usize).min(15);
            if first {
                divs[..index].fill(v);
                touched[..index].fill(true);
                first = false;
            }
            divs[index] = v;
            touched[index] = true;
            last_index = index;
        }
        if w.get(i + 1)? != "]" {
            w.sep(i + 1, ",")?;
            i += 1;
        }
    }
    if i >= w.t.len() {
        let file = "/__w/pytorch/pytorch/c10/core/AllocatorConfig.cpp";
        let f = Fault::unclosed("i < tokenizer.size()", file, 213);
        return Err(w.fail(
            i,
            f,
            "the list of 'roundup_power2_divisions' has no closing ']'",
        ));
    }
    let last = touched.iter().rposition(|t| *t).unwrap_or(0);
    let gaps: Vec<String> = (0..last)
        .filter(|s| !touched[*s])
        .map(|s| format!("{} MiB", 1u64 << s))
        .collect();
    if !gaps.is_empty() {
        let msg = format!(
            "the intervals starting at {} are not listed; torch does not fill gaps, so they get \
             no power-of-two rounding",
            gaps.join(", ")
        );
        w.warn(i, msg, None);
    }
    Ok(i)
}

/// The variable and string for torch's generic pass and for its CUDA pass.
type Source<'a> = Option<(&'static str, &'a str)>;

fn finish(f: Failure, w: &mut Walk, at_load: bool) -> ConfigError {
    w.key = f.key;
    let entry = w.entry(f.at);
    ConfigError {
        var: w.var,
        entry,
        reason: f.reason,
        fault: Box::new(f.fault),
        at_load,
    }
}

/// The whole torch 2.15 sequence on `conf`: the load-time scan, then the two passes in
/// torch's order. `reset` = torch's semantics; `false` applies a string on top. On error
/// `conf` is unchanged.
fn run(
    conf: &mut AllocConf,
    generic: Source,
    cuda: Source,
    mode: Mode,
    reset: bool,
) -> Result<Vec<Warning>, ConfigError> {
    let (gt, ct) = (
        generic.map(|(v, s)| (v, Tokens::new(s))),
        cuda.map(|(v, s)| (v, Tokens::new(s))),
    );
    let mut cw = ct.as_ref().map(|(v, t)| Walk::new(t, v, mode));
    let mut gw = gt.as_ref().map(|(v, t)| Walk::new(t, v, mode));
    let mut named = None;
    if let Some(w) = cw.as_mut() {
        named = load_time(w).map_err(|f| finish(f, w, true))?;
    }
    let load = named.unwrap_or(if reset { Backend::Native } else { conf.backend });
    let mut c = conf.clone();
    for step in 0..2 {
        if (step == 0) == (load == Backend::Native) {
            if let Some(w) = cw.as_mut() {
                cuda_pass(w, &mut c, load).map_err(|f| finish(f, w, false))?;
            }
        } else if let Some(w) = gw.as_mut() {
            generic_pass(w, &mut c, reset).map_err(|f| finish(f, w, false))?;
        }
    }
    c.backend = load;
    let mut warns = Vec::new();
    for (var, t) in gt.iter().chain(&ct) {
        for tok in t.toks.iter().filter(|t| t.squeezed) {
            let raw = &t.src[tok.start..tok.end];
            let msg = format!(
                "whitespace inside '{raw}' is ignored: read as '{}'",
                tok.text
            );
            warns.push(Warning::new(var, raw, msg));
        }
    }
    let mut seen = Vec::new();
    for w in cw.into_iter().chain(gw) {
        warns.extend(w.warns);
        seen.extend(w.seen);
    }
    whole_config_warnings(&c, &seen, &mut warns);
    if !reset {
        check_combination(&c, &seen)?;
    }
    let mut unique: Vec<Warning> = Vec::new();
    for w in warns {
        if !unique.contains(&w) {
            unique.push(w);
        }
    }
    *conf = c;
    Ok(unique)
}

/// Remarks on the configuration as a whole, attached to the entry they are about.
fn whole_config_warnings(c: &AllocConf, seen: &Seen, warns: &mut Vec<Warning>) {
    let mut push = |key: &str, message: String| {
        if let Some((_, entry, var)) = seen.iter().rev().find(|(k, _, _)| k == key) {
            warns.push(Warning::new(var, entry.clone(), message));
        }
    };
    if c.garbage_collection_threshold > 0.0 && c.per_process_memory_fraction >= 1.0 {
        let msg = "has no effect unless a memory fraction below 1 is set \
                   (per_process_memory_fraction or torch.cuda.set_per_process_memory_fraction)";
        push("garbage_collection_threshold", msg.into());
    }
    if c.backend == Backend::CudaMallocAsync {
        for key in GENERIC_KEYS.iter().filter(|k| !k.starts_with("pinned")) {
            push(
                key,
                format!("backend:cudaMallocAsync ignores {key}; torch does not warn about it"),
            );
        }
    }
    if c.roundup_bypass_threshold != u64::MAX {
        let t = c.roundup_bypass_threshold / MIB;
        let exact = t == 0 || (t.is_power_of_two() && (1..=15).contains(&t.trailing_zeros()));
        let list = divisions_value(&c.effective_divisions()).unwrap_or_else(|| "0".into());
        let how = match exact {
            true => "exactly",
            false => "approximately (exact only for 0 or a power-of-two MiB from 2 to 32768)",
        };
        let msg = format!(
            "PyTorch >= 2.0 rejects this PyTorch 1.13 key (Unrecognized key); cachalot accepts \
             it. In torch >= 2.0 write roundup_power2_divisions:{list} instead ({how} the same: \
             0 for the intervals above {t} MiB)"
        );
        push(LEGACY_KEY, msg);
    }
}

/// `CACHALOT_ALLOC_CONF` applied on top must still be a configuration torch would accept.
fn check_combination(c: &AllocConf, seen: &Seen) -> Result<(), ConfigError> {
    let min = c.large_segment_size / MIB;
    let sizes = [
        ("max_split_size_mb", c.max_split_size),
        ("max_non_split_rounding_mb", c.max_non_split_rounding_size),
    ];
    for (key, bytes) in sizes {
        if bytes != u64::MAX && bytes < c.large_segment_size {
            let blame = seen
                .iter()
                .rev()
                .find(|(k, _, _)| k == "large_segment_size_mb" || k == key);
            let (var, entry) =
                blame.map_or((CACHALOT_VAR, String::new()), |(_, e, v)| (*v, e.clone()));
            let fault = Fault::Value(format!(
                "CachingAllocator option {key} too small, must be >= {min}"
            ));
            let reason = format!(
                "{key} ({} MiB) must be at least large_segment_size_mb ({min} MiB)",
                bytes / MIB
            );
            return Err(ConfigError {
                var,
                entry,
                reason,
                fault: Box::new(fault),
                at_load: false,
            });
        }
    }
    Ok(())
}

/// Parses a `PYTORCH_CUDA_ALLOC_CONF` string the way torch 2.15 does, starting from the
/// defaults. Accepts exactly what torch accepts, plus the PyTorch 1.13 key
/// `roundup_bypass_threshold_mb` (with a warning); the warnings also say how junk was read.
pub fn parse_pytorch(s: &str) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    parse_as(s, CUDA_VAR, Mode::Pytorch)
}

/// Parses a `CACHALOT_ALLOC_CONF` string on its own: the same grammar and keys as
/// [`parse_pytorch`] plus cachalot's `expandable_oversize_exempt` and `research_after_flush`.
pub fn parse_cachalot(s: &str) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    parse_as(s, CACHALOT_VAR, Mode::Cachalot)
}

fn parse_as(
    s: &str,
    var: &'static str,
    mode: Mode,
) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    let mut conf = AllocConf::default();
    let warns = run(&mut conf, Some((var, s)), Some((var, s)), mode, true)?;
    conf.last_allocator_settings = s.to_string();
    Ok((conf, warns))
}

/// Applies a `CACHALOT_ALLOC_CONF` string on top of `conf`: only the keys it names change
/// (`large_segment_size_mb` also moves `max_non_split_rounding_mb` unless that is named too).
/// On error `conf` is left unchanged.
pub fn apply_cachalot(conf: &mut AllocConf, s: &str) -> Result<Vec<Warning>, ConfigError> {
    let src = Some((CACHALOT_VAR, s));
    run(conf, src, src, Mode::Cachalot, false)
}

/// Reads the allocator variables as torch 2.15 does (`get` is `std::env::var(..).ok()` or a
/// test stub), then applies `CACHALOT_ALLOC_CONF` on top. A variable set to "" counts as set.
pub fn from_env(
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
    if let Some(s) = get(CACHALOT_VAR) {
        src.cachalot = true;
        warns.extend(apply_cachalot(&mut conf, &s)?);
    }
    Ok((conf, warns, src))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
