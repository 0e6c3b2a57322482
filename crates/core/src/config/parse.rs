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
//! Findings from the oracle (`shared/oracle`, torch 2.15.0) where the spec is silent or wrong:
//!
//! | topic | spec (§1, §17.4) | oracle |
//! |---|---|---|
//! | env precedence | main-2026: CUDA → HIP → ALLOC, first set wins | generic pass: CUDA → HIP → ALLOC; CUDA pass and load-time backend: CUDA → ALLOC (HIP ignored on a CUDA build). An empty value counts as set. |
//! | error order | not stated | load time, then CUDA pass, then generic pass (generic first with `cudaMallocAsync`) |
//! | missing value (`max_split_size_mb:`) | "Index out of bounds" | aborts the process at load time (`terminate`), not a catchable error |
//! | unclosed `[` | "Expected closing bracket" | same text, but from `skipKey` at load time (abort) |
//! | `max_split_size_mb` bound | `>= 20` | `>= large_segment_size_mb` (20 by default); clamped to 17592186044415 MiB, so `-1` (wraps) = 18446744073708503040 B |
//! | `large_segment_size_mb` | `> 10`, parsed first | parsed first from *any* token position, even inside another key's list; also resets `max_non_split_rounding_mb` to it |
//! | `max_non_split_rounding_mb` | `>= 20` | `>= large_segment_size_mb` |
//! | `pinned_max_round_threshold_mb`, `pinned_max_cached_size_mb`, `pinned_free_catch_all` | pinned_max_* only named | all three are keys; no bounds; torch warns when round > cached |
//! | `expandable_segments_reserve` | fraction or `<n>G` | full-token decimal (no hex, inf, nan; subnormal ok), > 0; bad values only warn; `[` is taken as the value |
//! | `..._reserve_by_class` | list | each occurrence replaces the map; a bad value keeps the old one; a repeated class takes the later value |
//! | `backend` warning | any non-backend key | only CUDA-pass keys trigger torch's "ignores max_split_size_mb,..." warning |
//! | duplicate `backend` | not stated | `native` then `cudaMallocAsync` (or reverse): "parsed at runtime != ... at load time" assertion |
//! | roundup list | values checked before keys | yes: `[abc:3]` reports the division, `[3:3]` too |
//! | `garbage_collection_threshold` | needs a fraction (< 1 in 2.10+) | confirmed: fraction 1.0 leaves GC off, 0.9999999999 turns it on |
//! | `stod` | prefix parse | also hex floats, `inf`/`nan` (then rejected by the range check); subnormal or overflow → `std::out_of_range` |

use std::fmt;

use super::{AllocConf, Backend, MIB, ReserveSpec};

/// torch's `kLargeBuffer`, the default `large_segment_size_mb`.
const LARGE_BUFFER: u64 = 20 * MIB;
/// The largest MiB count torch keeps (`SIZE_MAX / 1 MiB`); bigger values are clamped to it.
pub(crate) const MAX_MB: u64 = u64::MAX / MIB;

/// Keys the generic pass owns.
pub(crate) const GENERIC_KEYS: [&str; 9] = [
    "large_segment_size_mb", "max_split_size_mb", "max_non_split_rounding_mb",
    "garbage_collection_threshold", "roundup_power2_divisions", "expandable_segments",
    "pinned_use_background_threads", "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb",
];
/// Keys the CUDA pass owns (including the ROCm spellings a CUDA build also accepts).
pub(crate) const CUDA_KEYS: [&str; 13] = [
    "backend", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
    "graph_capture_record_stream_reuse", "pinned_reserve_segment_size_mb",
    "pinned_num_register_threads", "per_process_memory_fraction", "pinned_free_catch_all",
    "throw_on_cudamalloc_oom", "expandable_segments_reserve", "expandable_segments_reserve_by_class",
];
/// PyTorch 1.13's key that cachalot accepts (with a warning) although torch ≥ 2.0 rejects it.
pub(crate) const LEGACY_KEY: &str = "roundup_bypass_threshold_mb";
/// Keys only `CACHALOT_ALLOC_CONF` accepts.
pub(crate) const CACHALOT_KEYS: [&str; 2] = ["expandable_oversize_exempt", "research_after_flush"];

const CUDA_VAR: &str = "PYTORCH_CUDA_ALLOC_CONF";
const HIP_VAR: &str = "PYTORCH_HIP_ALLOC_CONF";
const ALLOC_VAR: &str = "PYTORCH_ALLOC_CONF";
const CACHALOT_VAR: &str = "CACHALOT_ALLOC_CONF";
const HEADER: &str = "/__w/pytorch/pytorch/c10/core/AllocatorConfig.h";
const ASYNC_WARNING: &str = "backend:cudaMallocAsync ignores max_split_size_mb,\
roundup_power2_divisions, and garbage_collect_threshold.";

/// What torch 2.15 throws.
#[derive(Clone, Debug, PartialEq)]
enum Fault {
    /// `TORCH_INTERNAL_ASSERT` → `c10::Error`.
    Assert { cond: &'static str, file: &'static str, line: u32, msg: String },
    /// `TORCH_CHECK_VALUE` → `c10::ValueError`.
    Value(String),
    /// `std::invalid_argument` from `std::stoull` / `std::stod` (what() = the function name).
    InvalidArgument(&'static str),
    /// `std::out_of_range` from the same.
    OutOfRange(&'static str),
}

fn out_of_bounds(line: u32) -> Fault {
    let msg = "Index out of bounds in ConfigTokenizer".to_string();
    Fault::Assert { cond: "i < config_.size()", file: HEADER, line, msg }
}

fn unclosed(cond: &'static str, file: &'static str, line: u32) -> Fault {
    let msg = "Expected closing bracket ']' in ConfigTokenizer but reached end of config".into();
    Fault::Assert { cond, file, line, msg }
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
    fault: Fault,
    at_load: bool,
}

impl ConfigError {
    /// The exact text torch 2.15 raises for this string (what the oracle prints on stderr),
    /// e.g. `Unrecognized key 'no_such_key' in CUDA allocator config.`.
    pub fn torch_message(&self) -> String {
        match &self.fault {
            Fault::Assert { cond, file, line, msg } => format!(
                "{cond} INTERNAL ASSERT FAILED at \"{file}\":{line}, please report a bug to PyTorch. {msg}"
            ),
            Fault::Value(m) => m.clone(),
            Fault::InvalidArgument(f) | Fault::OutOfRange(f) => (*f).to_string(),
        }
    }

    /// The C++ exception type torch 2.15 throws (`c10::ValueError`, `c10::Error`,
    /// `std::invalid_argument` or `std::out_of_range`).
    pub fn torch_exception(&self) -> &'static str {
        match self.fault {
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

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entry.is_empty() {
            write!(f, "{}: {}", self.var, self.message)
        } else {
            write!(f, "{} entry '{}': {}", self.var, self.entry, self.message)
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
                if let Some(g) = g {
                    parts.push(format!("{g} (generic keys)"));
                }
                if let Some(c) = c {
                    parts.push(format!("{c} (CUDA keys and backend)"));
                }
            }
        }
        if self.cachalot {
            parts.push(CACHALOT_VAR.to_string());
        }
        if parts.is_empty() {
            f.write_str("defaults (no allocator variable set)")?;
        } else {
            f.write_str(&parts.join(" + "))?;
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

fn c_isspace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

impl<'s> Tokens<'s> {
    fn new(src: &'s str) -> Self {
        let mut toks: Vec<Tok> = Vec::new();
        let mut word: Option<Tok> = None;
        let mut gap = false;
        for (pos, ch) in src.char_indices() {
            if matches!(ch, ',' | ':' | '[' | ']') {
                toks.extend(word.take());
                let end = pos + 1;
                toks.push(Tok { text: ch.to_string(), start: pos, end, squeezed: false });
            } else if c_isspace(ch) {
                gap = word.is_some();
                continue;
            } else {
                let w = word.get_or_insert_with(|| Tok {
                    text: String::new(),
                    start: pos,
                    end: pos,
                    squeezed: false,
                });
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

/// One pass over the tokens: torch's index arithmetic, with cachalot's bookkeeping.
struct Walk<'t, 's> {
    t: &'t Tokens<'s>,
    var: &'static str,
    mode: Mode,
    key: usize,
    warns: Vec<Warning>,
    /// (key, entry) of every key a pass parsed, in order.
    seen: Vec<(String, String)>,
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

impl<'t, 's> Walk<'t, 's> {
    fn new(t: &'t Tokens<'s>, var: &'static str, mode: Mode) -> Self {
        Walk { t, var, mode, key: 0, warns: Vec::new(), seen: Vec::new() }
    }

    fn key_text(&self) -> &'t str {
        self.t.text(self.key)
    }

    /// The input from the current key to the end of token `end` (to the end of the input
    /// when `end` is past the last token).
    fn entry(&self, end: usize) -> String {
        let toks = &self.t.toks;
        let Some(first) = toks.get(self.key) else { return self.t.src.trim().to_string() };
        let stop = toks.get(end).map_or(self.t.src.len(), |t| t.end).max(first.end);
        self.t.src[first.start..stop].trim_end().to_string()
    }

    fn fail(&self, at: usize, fault: Fault, reason: String) -> Failure {
        Failure { fault, key: self.key, at, reason }
    }

    fn missing(&self, at: usize, fault: Fault) -> Failure {
        let key = self.key_text();
        let reason = if is_sep(key) {
            format!("stray '{key}': entries are key:value pairs separated by ','")
        } else {
            format!("'{key}' is missing its value: write {key}:<value>")
        };
        self.fail(at, fault, reason)
    }

    fn warn(&mut self, end: usize, message: String, torch_text: Option<String>) {
        let entry = self.entry(end);
        self.warns.push(Warning { var: self.var, entry, message, torch_text });
    }

    /// `tokenizer[i]`: out of range → assertion at AllocatorConfig.h:54.
    fn get(&self, i: usize) -> R<&'t str> {
        if i < self.t.len() { Ok(self.t.text(i)) } else { Err(self.missing(i, out_of_bounds(54))) }
    }

    /// `checkIndex(i)`: out of range → assertion at AllocatorConfig.h:123.
    fn index(&self, i: usize) -> R<&'t str> {
        if i < self.t.len() { Ok(self.t.text(i)) } else { Err(self.missing(i, out_of_bounds(123))) }
    }

    /// `checkToken(i, tok)`, whose result torch ignores for separators: a mismatch is read on
    /// by position, so cachalot warns.
    fn sep(&mut self, i: usize, tok: &str) -> R<()> {
        let found = self.index(i)?;
        if found != tok {
            let key = self.key_text();
            let msg = if tok == ":" {
                format!("expected ':' after '{key}' but found '{found}'; torch 2.15 does not check separators and takes the next token as the value")
            } else {
                format!("expected ',' after the value of '{key}' but found '{found}'; torch 2.15 does not check separators and skips it")
            };
            self.warn(i, msg, None);
        }
        Ok(())
    }

    /// `toSizeT(i)` = `std::stoull`.
    fn size_t(&mut self, i: usize) -> R<u64> {
        let tok = self.index(i)?;
        let key = self.key_text();
        match stoull(tok) {
            Ok((v, used, neg)) => {
                if neg && v != 0 {
                    let msg = format!("'{tok}' was read as {v}: std::stoull wraps negative numbers");
                    self.warn(i, msg, None);
                } else if used < tok.len() {
                    let msg = format!("'{tok}' was read as {v}: torch reads the leading number and ignores the rest");
                    self.warn(i, msg, None);
                }
                Ok(v)
            }
            Err(f @ Fault::OutOfRange(_)) => {
                Err(self.fail(i, f, format!("'{tok}' is too large for {key} (at most {})", u64::MAX)))
            }
            Err(f) => Err(self.fail(i, f, format!("{key} needs a whole number, got '{tok}'"))),
        }
    }

    /// `toDouble(i)` = `std::stod`.
    fn double(&mut self, i: usize) -> R<f64> {
        let tok = self.index(i)?;
        let key = self.key_text();
        match stod(tok) {
            Ok((v, used)) => {
                if used < tok.len() {
                    let msg = format!("'{tok}' was read as {v}: torch reads the leading number and ignores the rest");
                    self.warn(i, msg, None);
                }
                Ok(v)
            }
            Err(f @ Fault::OutOfRange(_)) => Err(self.fail(
                i,
                f,
                format!("'{tok}' is out of range for {key} (torch rejects overflowing and subnormal numbers)"),
            )),
            Err(f) => Err(self.fail(i, f, format!("{key} needs a number, got '{tok}'"))),
        }
    }

    /// `toBool(i)`: exactly `True` or `False`.
    fn boolean(&self, i: usize) -> R<bool> {
        match self.index(i)? {
            "True" => Ok(true),
            "False" => Ok(false),
            tok => {
                let fault = Fault::Value(format!(
                    "Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{tok}'"
                ));
                let key = self.key_text();
                Err(self.fail(i, fault, format!("{key} must be True or False (capitalised), got '{tok}'")))
            }
        }
    }

    /// `skipKey(i)`: past `:` and one value token, or to the `]` closing a list.
    fn skip_key(&self, i: usize) -> R<usize> {
        self.index(i + 1)?;
        let mut j = i + 2;
        if self.index(j)? != "[" {
            return Ok(j);
        }
        j += 1;
        while j < self.t.len() && self.t.text(j) != "]" {
            j += 1;
        }
        if j >= self.t.len() {
            let fault = unclosed("i < config_.size()", HEADER, 114);
            let reason = format!("the list of '{}' has no closing ']'", self.key_text());
            return Err(self.fail(j, fault, reason));
        }
        Ok(j)
    }

    /// `key : value` for a boolean; returns the value's index.
    fn bool_entry(&mut self, i: usize, slot: &mut bool) -> R<usize> {
        self.sep(i + 1, ":")?;
        *slot = self.boolean(i + 2)?;
        Ok(i + 2)
    }

    /// `key : value` for a size in MiB, clamped to [`MAX_MB`] as torch does; returns the MiB.
    fn mib_entry(&mut self, i: usize) -> R<u64> {
        self.sep(i + 1, ":")?;
        let v = self.size_t(i + 2)?;
        if v > MAX_MB {
            let msg = format!("{v} MiB is more than torch keeps; clamped to {MAX_MB} MiB");
            self.warn(i + 2, msg, None);
        }
        Ok(v.min(MAX_MB))
    }

    /// After a key's value: records the entry and consumes the separator torch expects.
    fn next(&mut self, i: usize, owner: bool) -> R<usize> {
        if owner {
            let key = self.key_text().to_string();
            let entry = self.entry(i);
            if self.seen.iter().any(|(k, _)| *k == key) {
                let msg = if key == "roundup_power2_divisions" {
                    format!("'{key}' is given more than once; torch applies each on top of the previous ones")
                } else {
                    format!("'{key}' is given more than once; the last one wins")
                };
                self.warn(i, msg, None);
            }
            self.seen.push((key, entry));
        }
        if i + 1 < self.t.len() {
            self.sep(i + 1, ",")?;
            return Ok(i + 2);
        }
        Ok(i + 1)
    }
}

/// `std::stoull(s)`: (value, bytes used, negative). Leading whitespace and a sign are
/// accepted; a negative number wraps modulo 2^64 as `strtoull` does.
fn stoull(s: &str) -> Result<(u64, usize, bool), Fault> {
    let b = s.as_bytes();
    let mut p = b.iter().take_while(|c| c_isspace(char::from(**c))).count();
    let neg = b.get(p) == Some(&b'-');
    if neg || b.get(p) == Some(&b'+') {
        p += 1;
    }
    let start = p;
    let mut v: Option<u64> = Some(0);
    while let Some(d) = b.get(p).filter(|c| c.is_ascii_digit()) {
        v = v.and_then(|v| v.checked_mul(10)).and_then(|v| v.checked_add(u64::from(d - b'0')));
        p += 1;
    }
    if p == start {
        return Err(Fault::InvalidArgument("stoull"));
    }
    let v = v.ok_or(Fault::OutOfRange("stoull"))?;
    Ok((if neg { v.wrapping_neg() } else { v }, p, neg))
}

fn digits(b: &[u8], mut p: usize, hex: bool) -> usize {
    while b.get(p).is_some_and(|c| if hex { c.is_ascii_hexdigit() } else { c.is_ascii_digit() }) {
        p += 1;
    }
    p
}

/// Length of a decimal mantissa (`12`, `1.5`, `.5`, `5.`) starting at `p`, plus its exponent
/// if one follows; `None` without a digit.
fn decimal_len(b: &[u8], p: usize) -> Option<usize> {
    let int_end = digits(b, p, false);
    let mut end = int_end;
    if b.get(end) == Some(&b'.') {
        end = digits(b, end + 1, false);
    }
    if end - p - usize::from(end > int_end) == 0 {
        return None;
    }
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let mut q = end + 1;
        if matches!(b.get(q), Some(b'+' | b'-')) {
            q += 1;
        }
        let exp_end = digits(b, q, false);
        if exp_end > q {
            end = exp_end;
        }
    }
    Some(end)
}

/// `std::stod(s)`: glibc `strtod` on the longest valid prefix; (value, bytes used).
fn stod(s: &str) -> Result<(f64, usize), Fault> {
    let b = s.as_bytes();
    let mut p = b.iter().take_while(|c| c_isspace(char::from(**c))).count();
    let neg = b.get(p) == Some(&b'-');
    if neg || b.get(p) == Some(&b'+') {
        p += 1;
    }
    let sign = if neg { -1.0 } else { 1.0 };
    let rest = s[p..].to_ascii_lowercase();
    if rest.starts_with("inf") {
        let n = if rest.starts_with("infinity") { 8 } else { 3 };
        return Ok((sign * f64::INFINITY, p + n));
    }
    if rest.starts_with("nan") {
        let mut n = 3;
        if let Some(close) = rest[3..].strip_prefix('(').and_then(|r| r.find(')')) {
            if rest[4..4 + close].bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
                n = 5 + close;
            }
        }
        return Ok((f64::NAN, p + n));
    }
    if rest.starts_with("0x") {
        let q = p + 2;
        let int_end = digits(b, q, true);
        let frac_end = if b.get(int_end) == Some(&b'.') { digits(b, int_end + 1, true) } else { int_end };
        if frac_end - q - usize::from(frac_end > int_end) > 0 {
            let (v, end, inexact) = hex_float(b, q, int_end, frac_end);
            let v = sign * v;
            if v.is_infinite() || (v != 0.0 && v.abs() < f64::MIN_POSITIVE && inexact) || (v == 0.0 && inexact) {
                return Err(Fault::OutOfRange("stod"));
            }
            return Ok((v, end));
        }
        // "0x" without hex digits: strtod reads the "0".
        return Ok((sign * 0.0, p + 1));
    }
    let end = decimal_len(b, p).ok_or(Fault::InvalidArgument("stod"))?;
    let text = &s[p..end];
    let v: f64 = text.parse().map_err(|_| Fault::InvalidArgument("stod"))?;
    let mantissa = text.split(['e', 'E']).next().unwrap_or("");
    let nonzero = mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c));
    // glibc sets ERANGE on overflow and when the result is tiny after rounding (below
    // DBL_MIN even at unbounded exponent range), which for `v == DBL_MIN` needs the exact value.
    let tiny = v < f64::MIN_POSITIVE || (v == f64::MIN_POSITIVE && below_tiny_threshold(text));
    if v.is_infinite() || (nonzero && tiny) {
        return Err(Fault::OutOfRange("stod"));
    }
    Ok((sign * v, end))
}

/// Whether the decimal `text` (no sign) is below 2^-1022 - 2^-1076, the smallest value that
/// rounds to `DBL_MIN` with an unbounded exponent: N·10^k < (2^54 - 1)·2^-1076.
fn below_tiny_threshold(text: &str) -> bool {
    fn mul(a: &mut Vec<u32>, m: u32) {
        let mut carry = 0u64;
        for x in a.iter_mut() {
            let v = u64::from(*x) * u64::from(m) + carry;
            *x = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            a.push(carry as u32);
        }
    }
    let (mant, exp) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let digits: String = format!("{int}{frac}").trim_start_matches('0').chars().take(1200).collect();
    let dropped = int.len() + frac.len() - digits.len();
    let lead_zeros = format!("{int}{frac}").len() - format!("{int}{frac}").trim_start_matches('0').len();
    let exp: i64 = exp.parse().unwrap_or(0);
    let k = exp - frac.len() as i64 + (dropped - lead_zeros) as i64;
    if k >= 0 || k < -5000 {
        return k < -5000;
    }
    let mut lhs = vec![0u32];
    for d in digits.bytes() {
        let mut carry = u64::from(d - b'0');
        for x in lhs.iter_mut() {
            let v = u64::from(*x) * 10 + carry;
            *x = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            lhs.push(carry as u32);
        }
    }
    for _ in 0..1076 / 16 {
        mul(&mut lhs, 1 << 16);
    }
    mul(&mut lhs, 1 << (1076 % 16));
    let mut rhs = vec![u32::MAX, (1 << 22) - 1]; // 2^54 - 1
    for _ in 0..-k {
        mul(&mut rhs, 10);
    }
    let trim = |v: &mut Vec<u32>| while v.len() > 1 && v.last() == Some(&0) { v.pop(); };
    trim(&mut lhs);
    trim(&mut rhs);
    (lhs.len(), lhs.iter().rev().collect::<Vec<_>>()) < (rhs.len(), rhs.iter().rev().collect::<Vec<_>>())
}

/// A hex float's value: digits in `b[q..frac_end]` (a `.` at `int_end`), then an optional
/// binary exponent. Returns (value, end, inexact), rounded to nearest even.
fn hex_float(b: &[u8], q: usize, int_end: usize, frac_end: usize) -> (f64, usize, bool) {
    let (mut m, mut e2, mut sticky) = (0u64, 0i64, false);
    for (k, &c) in b[q..frac_end].iter().enumerate() {
        if q + k == int_end {
            continue;
        }
        let d = u64::from(char::from(c).to_digit(16).unwrap_or(0));
        let frac = q + k > int_end;
        if m >> 60 == 0 {
            m = m << 4 | d;
            e2 -= if frac { 4 } else { 0 };
        } else {
            sticky |= d != 0;
            e2 += if frac { 0 } else { 4 };
        }
    }
    let mut end = frac_end;
    if matches!(b.get(end), Some(b'p' | b'P')) {
        let mut r = end + 1;
        let neg = b.get(r) == Some(&b'-');
        if neg || b.get(r) == Some(&b'+') {
            r += 1;
        }
        let exp_end = digits(b, r, false);
        if exp_end > r {
            let mut x: i64 = 0;
            for &c in &b[r..exp_end] {
                x = (x * 10 + i64::from(c - b'0')).min(1 << 40);
            }
            e2 += if neg { -x } else { x };
            end = exp_end;
        }
    }
    if m == 0 {
        return (0.0, end, false);
    }
    let lz = i64::from(m.leading_zeros());
    let m = u128::from(m << lz);
    let exp = e2 - lz + 63; // exponent of the leading bit
    if exp > 1023 {
        return (f64::INFINITY, end, true);
    }
    let shift = (11 + (-1022 - exp).max(0)).min(127) as u32;
    let kept = m >> shift;
    let rest = m & ((1u128 << shift) - 1);
    let half = 1u128 << (shift - 1);
    let inexact = rest != 0 || sticky;
    let up = rest > half || (rest == half && (sticky || kept & 1 == 1));
    let kept = (kept + u128::from(up)) as u64;
    if exp < -1022 {
        return (f64::from_bits(kept), end, inexact);
    }
    let (kept, exp) = if kept == 1 << 53 { (kept >> 1, exp + 1) } else { (kept, exp) };
    if exp > 1023 {
        return (f64::INFINITY, end, true);
    }
    let bits = ((exp + 1023) as u64) << 52 | (kept & ((1 << 52) - 1));
    (f64::from_bits(bits), end, inexact)
}

/// An `expandable_segments_reserve` value: a positive finite decimal, read whole (as
/// `std::istream >> double` does: no hex, no `inf`/`nan`), optionally suffixed `G`/`g` (GiB).
pub(crate) fn reserve_spec(tok: &str) -> Option<ReserveSpec> {
    let (num, gib) = match tok.strip_suffix(['G', 'g']) {
        Some(n) => (n, true),
        None => (tok, false),
    };
    let b = num.as_bytes();
    let p = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    if decimal_len(b, p)? != b.len() {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    (v > 0.0 && v.is_finite()).then_some(if gib { ReserveSpec::GiB(v) } else { ReserveSpec::Fraction(v) })
}

/// The load-time backend scan. `Some` when a `backend` key was found.
fn load_time(w: &mut Walk) -> R<Option<Backend>> {
    let mut i = 0;
    while i < w.t.len() {
        w.key = i;
        if w.t.text(i) == "backend" {
            w.index(i + 1)?;
            let v = w.get(i + 2)?;
            let async_ = v == "cudaMallocAsync";
            return Ok(Some(if async_ { Backend::CudaMallocAsync } else { Backend::Native }));
        }
        i = w.skip_key(i)? + 2;
    }
    Ok(None)
}

/// The CUDA pass (`CUDAAllocatorConfig::parseArgs`).
fn cuda_pass(w: &mut Walk, c: &mut AllocConf, load: Backend) -> R<()> {
    let (mut used_async, mut native_specific) = (false, false);
    let mut i = 0;
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
                    let f = Fault::Value("Unknown allocator backend, options are native and cudaMallocAsync".into());
                    return Err(w.fail(i + 2, f, format!("backend must be native or cudaMallocAsync, got '{v}'")));
                }
                used_async = v == "cudaMallocAsync";
                if v != load.name() {
                    let msg = format!("Allocator backend parsed at runtime != allocator backend parsed at load time, {v} != {}", load.name());
                    let f = Fault::Assert { cond: "tokenizer[i] == get()->name()", file: "/__w/pytorch/pytorch/c10/cuda/CUDAAllocatorConfig.cpp", line: 64, msg };
                    let why = format!("backend is given twice with different values: torch picks '{}' from the first one when it loads, then rejects '{v}'", load.name());
                    return Err(w.fail(i + 2, f, why));
                }
                i + 2
            }
            "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => w.bool_entry(i, &mut c.release_lock_on_cudamalloc)?,
            "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => w.bool_entry(i, &mut c.pinned_use_cuda_host_register)?,
            "graph_capture_record_stream_reuse" => w.bool_entry(i, &mut c.graph_capture_record_stream_reuse)?,
            "pinned_free_catch_all" => w.bool_entry(i, &mut c.pinned_free_catch_all)?,
            "throw_on_cudamalloc_oom" => w.bool_entry(i, &mut c.throw_on_cudamalloc_oom)?,
            "pinned_num_register_threads" => {
                w.sep(i + 1, ":")?;
                let v = w.size_t(i + 2)?;
                let why = format!("pinned_num_register_threads must be a power of two no greater than 128, got {v}");
                if !v.is_power_of_two() {
                    let f = Fault::Value(format!("Number of register threads has to be power of 2, got {v}"));
                    return Err(w.fail(i + 2, f, why));
                }
                if v > 128 {
                    let f = Fault::Value(format!("Number of register threads should be less than or equal to 128, got {v}"));
                    return Err(w.fail(i + 2, f, why));
                }
                c.pinned_num_register_threads = v;
                i + 2
            }
            "pinned_reserve_segment_size_mb" => {
                w.sep(i + 1, ":")?;
                let v = w.size_t(i + 2)?;
                if v == 0 {
                    let f = Fault::Value("Pinned reserve segment size has to be greater than 0".into());
                    return Err(w.fail(i + 2, f, "pinned_reserve_segment_size_mb must be greater than 0".into()));
                }
                c.pinned_reserve_segment_size_mb = v;
                i + 2
            }
            "per_process_memory_fraction" => {
                w.sep(i + 1, ":")?;
                let v = w.double(i + 2)?;
                if !(0.0..=1.0).contains(&v) {
                    let f = Fault::Value("per_process_memory_fraction is invalid, set it in [0.0, 1.0]".into());
                    let tok = w.t.text(i + 2);
                    return Err(w.fail(i + 2, f, format!("per_process_memory_fraction must be in [0, 1], got '{tok}'")));
                }
                c.per_process_memory_fraction = v;
                i + 2
            }
            "expandable_segments_reserve" => {
                w.sep(i + 1, ":")?;
                let tok = w.get(i + 2)?;
                match reserve_spec(tok) {
                    Some(s) => {
                        tiny_reserve_warning(w, i + 2, s);
                        c.expandable_segments_reserve = Some(s);
                    }
                    None => reserve_warning(w, i + 2, tok),
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
        let msg = "torch prints this warning whenever a CUDA-specific key (release_lock_on_cudamalloc, per_process_memory_fraction, pinned_*, ...) is combined with backend:cudaMallocAsync; the keys it names are not checked".to_string();
        w.warns.push(Warning { var: w.var, entry: String::new(), message: msg, torch_text: Some(ASYNC_WARNING.into()) });
    }
    Ok(())
}

fn reserve_warning(w: &mut Walk, i: usize, tok: &str) {
    let torch = format!("Ignoring invalid expandable-segment reserve value '{tok}' in PYTORCH_CUDA_ALLOC_CONF (expected a positive, finite fraction like 0.5 or an absolute size like 40G); using default.");
    let msg = format!("'{tok}' is not a positive fraction (0.5) or size in GiB (40G); torch ignores it and keeps the previous reserve");
    w.warn(i, msg, Some(torch));
}

/// A reserve below one 20 MiB page (on an 80 GiB device) makes torch fail every expandable
/// allocation ("Failed to reserve ... virtual address space").
fn tiny_reserve_warning(w: &mut Walk, i: usize, s: ReserveSpec) {
    let tiny = match s {
        ReserveSpec::Fraction(f) => f < 1.0 / 4096.0,
        ReserveSpec::GiB(g) => g < 20.0 / 1024.0,
    };
    if tiny {
        let msg = "this reserve is smaller than one 20 MiB page (for a fraction: on an 80 GiB device); torch accepts it, then fails every expandable-segment allocation".to_string();
        w.warn(i, msg, None);
    }
}

/// `expandable_segments_reserve_by_class:[class:reserve,...]`; returns the index of `]`.
fn reserve_by_class(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    w.sep(i + 1, ":")?;
    let mut i = i + 2;
    if w.index(i)? != "[" {
        w.warn(i, "expected '[' to open the list; torch reads on by position".into(), None);
    }
    c.expandable_segments_reserve_by_class.clear();
    i += 1;
    while w.index(i)? != "]" {
        let name = w.t.text(i).to_string();
        w.sep(i + 1, ":")?;
        i += 2;
        let tok = w.get(i)?;
        let spec = reserve_spec(tok);
        if let Some(s) = spec {
            tiny_reserve_warning(w, i, s);
        }
        match spec {
            Some(s) => match c.expandable_segments_reserve_by_class.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = s,
                None => c.expandable_segments_reserve_by_class.push((name, s)),
            },
            None => reserve_warning(w, i, tok),
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
    let f = Fault::Value(format!("Unrecognized key '{key}' in {which} allocator config."));
    let end = if i + 2 < w.t.len() { i + 2 } else { i };
    let reason = if is_sep(key) {
        format!("stray '{key}': entries are key:value pairs separated by ','")
    } else if CACHALOT_KEYS.contains(&key) {
        format!("'{key}' is a cachalot key: set it in CACHALOT_ALLOC_CONF")
    } else {
        let mut valid: Vec<&str> = super::KEYS.iter().map(|k| k.name).collect();
        if w.mode == Mode::Pytorch {
            valid.retain(|k| !CACHALOT_KEYS.contains(k));
        }
        let hint = if valid.contains(&format!("{key}_mb").as_str()) { format!(" (did you mean {key}_mb?)") } else { String::new() };
        format!("unknown key '{key}'{hint}; valid keys: {}", valid.join(", "))
    };
    w.fail(end, f, reason)
}

/// `large_segment_size_mb : value`; returns the value's index.
fn large_segment(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    let v = w.mib_entry(i)?;
    if v <= 10 {
        let f = Fault::Value("CachingAllocator option large_segment_size_mb must be > 10 MB".into());
        return Err(w.fail(i + 2, f, "large_segment_size_mb must be greater than 10 (MiB)".into()));
    }
    c.large_segment_size = v * MIB;
    Ok(i + 2)
}

/// `max_split_size_mb` / `max_non_split_rounding_mb`: at least `large_segment_size_mb`.
fn bounded_mib(w: &mut Walk, c: &AllocConf, i: usize, what: &str) -> R<u64> {
    w.sep(i + 1, ":")?;
    let v = w.size_t(i + 2)?;
    let min = c.large_segment_size / MIB;
    if v < min {
        let f = Fault::Value(format!("CachingAllocator option {what} too small, must be >= {min}"));
        let of = if min == 20 { String::new() } else { " (= large_segment_size_mb)".into() };
        return Err(w.fail(i + 2, f, format!("{what} must be at least {min}{of} (MiB)")));
    }
    if v > MAX_MB {
        w.warn(i + 2, format!("{v} MiB is more than torch keeps; clamped to {MAX_MB} MiB"), None);
    }
    Ok(v.min(MAX_MB) * MIB)
}

/// The generic pass (`AcceleratorAllocatorConfig::parseArgs`). `reset` = torch's behaviour of
/// resetting the options it owns at every parse; `false` for `CACHALOT_ALLOC_CONF` on top.
fn generic_pass(w: &mut Walk, c: &mut AllocConf, reset: bool) -> R<()> {
    if reset {
        c.max_split_size = u64::MAX;
        c.roundup_power2_divisions = [0; 16];
        c.garbage_collection_threshold = 0.0;
        c.large_segment_size = LARGE_BUFFER;
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
        let owner = GENERIC_KEYS.contains(&key) || key == LEGACY_KEY || CACHALOT_KEYS.contains(&key);
        i = match key {
            // Read by the pre-pass above; the main loop only steps over it.
            "large_segment_size_mb" => w.skip_key(i)?,
            "max_split_size_mb" => {
                c.max_split_size = bounded_mib(w, c, i, key)?;
                i + 2
            }
            "max_non_split_rounding_mb" => {
                c.max_non_split_rounding_size = bounded_mib(w, c, i, key)?;
                i + 2
            }
            "garbage_collection_threshold" => {
                w.sep(i + 1, ":")?;
                let v = w.double(i + 2)?;
                if !(v > 0.0 && v < 1.0) {
                    let f = Fault::Value("garbage_collect_threshold is invalid, set it in (0.0, 1.0)".into());
                    let tok = w.t.text(i + 2);
                    return Err(w.fail(i + 2, f, format!("garbage_collection_threshold must be strictly between 0 and 1, got '{tok}'")));
                }
                c.garbage_collection_threshold = v;
                i + 2
            }
            "roundup_power2_divisions" => roundup(w, c, i)?,
            "expandable_segments" => w.bool_entry(i, &mut c.expandable_segments)?,
            "pinned_use_background_threads" => w.bool_entry(i, &mut c.pinned_use_background_threads)?,
            "pinned_max_round_threshold_mb" => {
                c.pinned_max_round_threshold = w.mib_entry(i)? * MIB;
                i + 2
            }
            "pinned_max_cached_size_mb" => {
                c.pinned_max_cached_size = w.mib_entry(i)? * MIB;
                i + 2
            }
            LEGACY_KEY => {
                c.roundup_bypass_threshold = w.mib_entry(i)?.saturating_mul(MIB);
                i + 2
            }
            "expandable_oversize_exempt" if w.mode == Mode::Cachalot => {
                w.bool_entry(i, &mut c.cachalot.expandable_oversize_exempt)?
            }
            "research_after_flush" if w.mode == Mode::Cachalot => w.bool_entry(i, &mut c.cachalot.research_after_flush)?,
            _ if !is_known(key, w.mode) => return Err(unknown_key(w, i, "Accelerator")),
            _ => w.skip_key(i)?,
        };
        i = w.next(i, owner)?;
    }
    let (round, cached) = (c.pinned_max_round_threshold, c.pinned_max_cached_size);
    if round != u64::MAX && cached != u64::MAX && round > cached {
        let torch = format!("pinned_max_round_threshold_mb ({}) > pinned_max_cached_size_mb ({}). The cache size limit takes precedence: allocations above pinned_max_cached_size_mb are never rounded up.", round / MIB, cached / MIB);
        w.warns.push(Warning { var: w.var, entry: String::new(), message: torch.clone(), torch_text: Some(torch) });
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
            let f = Fault::Value("For roundups, the divisions has to be power of 2 ".into());
            let why = format!("roundup_power2_divisions must be a power of two (1, 2, 4, 8, ...) or a [MiB:N,...,>:N] list, got {v}");
            return Err(w.fail(i, f, why));
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
            let f = Fault::Value("For roundups, the divisions has to be power of 2 or 0 to disable roundup ".into());
            return Err(w.fail(i, f, format!("roundup_power2_divisions list values must be 0 or a power of two, got {v}")));
        }
        if w.t.text(key_at) == ">" {
            if first {
                w.warn(i, "'>' before any interval fills from the 2 MiB interval up: requests below 2 MiB keep slot 0 (0 = no rounding)".into(), None);
            }
            for s in last_index + 1..16 {
                divs[s] = v;
                touched[s] = true;
            }
        } else {
            let boundary = w.size_t(key_at)?;
            if !boundary.is_power_of_two() {
                let f = Fault::Value("For roundups, the intervals have to be power of 2 ".into());
                let tok = w.t.text(key_at);
                return Err(w.fail(i, f, format!("roundup_power2_divisions list keys must be powers of two (MiB) or '>', got '{tok}'")));
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
        let f = unclosed("i < tokenizer.size()", "/__w/pytorch/pytorch/c10/core/AllocatorConfig.cpp", 213);
        return Err(w.fail(i, f, "the list of 'roundup_power2_divisions' has no closing ']'".into()));
    }
    let last = touched.iter().rposition(|t| *t).unwrap_or(0);
    let gaps: Vec<String> = (0..last).filter(|s| !touched[*s]).map(|s| format!("{} MiB", 1u64 << s)).collect();
    if !gaps.is_empty() {
        let msg = format!("the intervals starting at {} are not listed; torch does not fill gaps, so they get no power-of-two rounding", gaps.join(", "));
        w.warn(i, msg, None);
    }
    Ok(i)
}

/// Which variables feed one torch-style parse.
struct Sources<'a> {
    generic: Option<(&'static str, &'a str)>,
    cuda: Option<(&'static str, &'a str)>,
}

fn finish(f: Failure, w: &Walk, at_load: bool) -> ConfigError {
    let mut w2 = Walk::new(w.t, w.var, w.mode);
    w2.key = f.key;
    ConfigError { var: w.var, entry: w2.entry(f.at), reason: f.reason, fault: f.fault, at_load }
}

/// The whole torch 2.15 sequence on `conf` (load-time scan, then the two passes in torch's
/// order). `reset` = torch's semantics; `false` applies a string on top.
fn run(conf: &mut AllocConf, src: Sources, mode: Mode, reset: bool) -> Result<Vec<Warning>, ConfigError> {
    let gt = src.generic.map(|(v, s)| (v, Tokens::new(s)));
    let ct = src.cuda.map(|(v, s)| (v, Tokens::new(s)));
    let mut warns = Vec::new();
    let mut named_backend = None;
    let mut cw = ct.as_ref().map(|(v, t)| Walk::new(t, v, mode));
    let mut gw = gt.as_ref().map(|(v, t)| Walk::new(t, v, mode));
    if let Some(w) = cw.as_mut() {
        named_backend = load_time(w).map_err(|f| finish(f, w, true))?;
    }
    let load = named_backend.unwrap_or(if reset { Backend::Native } else { conf.backend });
    let mut c = conf.clone();
    let cuda_first = load == Backend::Native;
    for step in 0..2 {
        if (step == 0) == cuda_first {
            if let Some(w) = cw.as_mut() {
                cuda_pass(w, &mut c, load).map_err(|f| finish(f, w, false))?;
            }
        } else if let Some(w) = gw.as_mut() {
            generic_pass(w, &mut c, reset).map_err(|f| finish(f, w, false))?;
        }
    }
    c.backend = load;
    for (v, t) in gt.iter().chain(ct.iter()) {
        for tok in t.toks.iter().filter(|t| t.squeezed) {
            let message = format!("whitespace inside '{}' is ignored: read as '{}'", &t.src[tok.start..tok.end], tok.text);
            warns.push(Warning { var: v, entry: t.src[tok.start..tok.end].to_string(), message, torch_text: None });
        }
    }
    let mut seen = Vec::new();
    for w in cw.into_iter().chain(gw) {
        warns.extend(w.warns);
        seen.extend(w.seen.into_iter().map(|(k, e)| (k, e, w.var)));
    }
    whole_config_warnings(&c, &seen, &mut warns);
    if !reset {
        check_combination(&c, &seen)?;
    }
    let mut unique = Vec::new();
    for w in warns {
        if !unique.contains(&w) {
            unique.push(w);
        }
    }
    *conf = c;
    Ok(unique)
}

/// Remarks on the configuration as a whole.
fn whole_config_warnings(c: &AllocConf, seen: &[(String, String, &'static str)], warns: &mut Vec<Warning>) {
    let entry = |key: &str| seen.iter().rev().find(|(k, _, _)| k == key).map(|(_, e, v)| (e.clone(), *v));
    let mut push = |key: &str, message: String| {
        if let Some((entry, var)) = entry(key) {
            warns.push(Warning { var, entry, message, torch_text: None });
        }
    };
    if c.garbage_collection_threshold > 0.0 && c.per_process_memory_fraction >= 1.0 {
        push("garbage_collection_threshold", "has no effect unless a memory fraction below 1 is set (per_process_memory_fraction or torch.cuda.set_per_process_memory_fraction)".into());
    }
    if c.backend == Backend::CudaMallocAsync {
        for key in ["max_split_size_mb", "max_non_split_rounding_mb", "large_segment_size_mb", "roundup_power2_divisions", "garbage_collection_threshold", "expandable_segments"] {
            push(key, format!("backend:cudaMallocAsync ignores {key}; torch does not warn about it"));
        }
    }
    if c.roundup_bypass_threshold != u64::MAX {
        let t = c.roundup_bypass_threshold / MIB;
        let exact = t == 0 || (t.is_power_of_two() && (1..=15).contains(&t.trailing_zeros()));
        let list = super::keys::divisions_value(&c.effective_divisions()).unwrap_or_else(|| "0".into());
        let how = if exact { "exactly" } else { "approximately (exact only for 0 or a power-of-two MiB from 2 to 32768)" };
        push(LEGACY_KEY, format!("PyTorch >= 2.0 rejects this PyTorch 1.13 key (Unrecognized key); cachalot accepts it. In torch >= 2.0 write roundup_power2_divisions:{list} instead ({how} the same: 0 for the intervals above {t} MiB)"));
    }
}

/// `CACHALOT_ALLOC_CONF` applied on top must still be a configuration torch would accept.
fn check_combination(c: &AllocConf, seen: &[(String, String, &'static str)]) -> Result<(), ConfigError> {
    let min = c.large_segment_size / MIB;
    for (key, bytes) in [("max_split_size_mb", c.max_split_size), ("max_non_split_rounding_mb", c.max_non_split_rounding_size)] {
        if bytes != u64::MAX && bytes < c.large_segment_size {
            let (var, entry) = seen.iter().rev().find(|(k, _, _)| k == "large_segment_size_mb" || k == key).map_or((CACHALOT_VAR, String::new()), |(_, e, v)| (*v, e.clone()));
            let fault = Fault::Value(format!("CachingAllocator option {key} too small, must be >= {min}"));
            let reason = format!("{key} ({} MiB) must be at least large_segment_size_mb ({min} MiB)", bytes / MIB);
            return Err(ConfigError { var, entry, reason, fault, at_load: false });
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

fn parse_as(s: &str, var: &'static str, mode: Mode) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    let mut conf = AllocConf::default();
    let warns = run(&mut conf, Sources { generic: Some((var, s)), cuda: Some((var, s)) }, mode, true)?;
    conf.last_allocator_settings = s.to_string();
    Ok((conf, warns))
}

/// Applies a `CACHALOT_ALLOC_CONF` string on top of `conf`: only the keys it names change
/// (`large_segment_size_mb` also moves `max_non_split_rounding_mb` unless that is named too).
/// On error `conf` is left unchanged.
pub fn apply_cachalot(conf: &mut AllocConf, s: &str) -> Result<Vec<Warning>, ConfigError> {
    run(conf, Sources { generic: Some((CACHALOT_VAR, s)), cuda: Some((CACHALOT_VAR, s)) }, Mode::Cachalot, false)
}

/// Reads the allocator variables as torch 2.15 does (`get` is `std::env::var(..).ok()` or a
/// test stub), then applies `CACHALOT_ALLOC_CONF` on top. A variable set to "" counts as set.
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<(AllocConf, Vec<Warning>, EnvSource), ConfigError> {
    let vals: Vec<(&'static str, Option<String>)> = [CUDA_VAR, HIP_VAR, ALLOC_VAR].iter().map(|v| (*v, get(v))).collect();
    let first = |names: &[&str]| vals.iter().find(|(v, s)| names.contains(v) && s.is_some()).map(|(v, s)| (*v, s.as_deref().unwrap_or("")));
    let generic = first(&[CUDA_VAR, HIP_VAR, ALLOC_VAR]);
    let cuda = first(&[CUDA_VAR, ALLOC_VAR]);
    let mut conf = AllocConf::default();
    let mut warns = run(&mut conf, Sources { generic, cuda }, Mode::Pytorch, true)?;
    conf.last_allocator_settings = generic.map_or(String::new(), |(_, s)| s.to_string());
    let mut src = EnvSource { generic: generic.map(|g| g.0), cuda: cuda.map(|c| c.0), ..EnvSource::default() };
    src.ignored = vals.iter().filter(|(v, s)| s.is_some() && Some(*v) != src.generic && Some(*v) != src.cuda).map(|(v, _)| *v).collect();
    for var in &src.ignored {
        let used = src.generic.unwrap_or(CUDA_VAR);
        let message = format!("ignored: torch 2.15 reads {used} first (PYTORCH_CUDA_ALLOC_CONF, then PYTORCH_HIP_ALLOC_CONF for generic keys, then PYTORCH_ALLOC_CONF)");
        warns.push(Warning { var, entry: String::new(), message, torch_text: None });
    }
    if src.generic == Some(HIP_VAR) {
        let message = format!("a CUDA build of torch 2.15 reads this variable only for the generic keys (max_split_size_mb, expandable_segments, ...); the CUDA keys and backend come from {}", src.cuda.unwrap_or("the defaults"));
        warns.push(Warning { var: HIP_VAR, entry: String::new(), message, torch_text: None });
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
