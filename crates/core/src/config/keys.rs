//! The configuration keys: the table ([`KEYS`]), the value syntax torch reads them with (its C
//! library number readers, reproduced exactly), and the ways back from an [`AllocConf`] to
//! text: [`AllocConf::describe`] (one line per key) and [`AllocConf::to_pytorch_string`].

use super::{AllocConf, Backend, MIB, ReserveSpec};

/// One configuration key: what it is called, its unit, its default and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyDoc {
    /// The key as written in the configuration string.
    pub name: &'static str,
    /// Other spellings torch accepts for the same option (the ROCm names).
    pub aliases: &'static [&'static str],
    /// The unit or form of the value.
    pub unit: &'static str,
    /// The default, as text.
    pub default: &'static str,
    /// What the option does, in one line.
    pub doc: &'static str,
    /// Accepted only in `CACHALOT_ALLOC_CONF` (torch has no such key).
    pub cachalot_only: bool,
    /// A PyTorch 1.13 key that torch ≥ 2.0 rejects; cachalot accepts it with a warning.
    pub legacy: bool,
    /// The pass of torch's parser that reads the key (the other one skips it).
    pub pass: Pass,
}

/// Which of torch 2.15's two parse passes reads a key (see the `passes` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// `AcceleratorAllocatorConfig::parseArgs`: sizes, rounding, garbage collection,
    /// `expandable_segments`, three pinned keys; also the legacy and cachalot keys.
    Generic,
    /// `CUDAAllocatorConfig::parseArgs`: backend, locks, fraction, reserves, the other pinned
    /// keys.
    Cuda,
}

const fn key(
    pass: Pass,
    name: &'static str,
    unit: &'static str,
    default: &'static str,
    doc: &'static str,
) -> KeyDoc {
    KeyDoc {
        name,
        aliases: &[],
        unit,
        default,
        doc,
        cachalot_only: false,
        legacy: false,
        pass,
    }
}

use Pass::{Cuda as C, Generic as G};

/// Every key cachalot understands, in the order `describe` and `to_pytorch_string` use.
#[rustfmt::skip]
pub const KEYS: &[KeyDoc] = &[
    key(C, "backend", "name", "native", "allocator implementation: native (the caching allocator) or cudaMallocAsync (the driver's pool)"),
    key(G, "max_split_size_mb", "MiB", "unlimited", "blocks at least this big are never split and only serve requests at least this big (>= large_segment_size_mb)"),
    key(G, "max_non_split_rounding_mb", "MiB", "large_segment_size_mb (20)", "how much bigger than an oversize request a cached oversize block may be and still be handed out whole"),
    key(G, "large_segment_size_mb", "MiB", "20", "segment size for 1-10 MiB requests and page size of large-pool expandable segments (> 10)"),
    key(G, "roundup_power2_divisions", "N or [MiB:N,...,>:N]", "0 (off)", "round requests up to 1/N steps between powers of two, per size interval starting at MiB"),
    KeyDoc { legacy: true, ..key(G, "roundup_bypass_threshold_mb", "MiB", "unlimited", "PyTorch 1.13: requests above this skip power-of-two rounding (torch >= 2.0 rejects the key)") },
    key(G, "garbage_collection_threshold", "fraction (0, 1)", "0 (off)", "free old cached segments once reserved memory passes this share of the memory-fraction limit (needs a fraction < 1)"),
    key(G, "expandable_segments", "True/False", "False", "grow segments by mapping more pages instead of allocating new segments"),
    KeyDoc { aliases: &["release_lock_on_hipmalloc"], ..key(C, "release_lock_on_cudamalloc", "True/False", "False", "release the allocator lock while cudaMalloc runs") },
    key(C, "per_process_memory_fraction", "fraction [0, 1]", "1", "cap reserved memory at this fraction of the device's memory"),
    key(C, "throw_on_cudamalloc_oom", "True/False", "False", "with a fraction below 1, reject requests that would pass it before calling cudaMalloc"),
    key(C, "expandable_segments_reserve", "fraction or <n>G", "1.125 x device memory", "virtual address space reserved for each expandable segment"),
    key(C, "expandable_segments_reserve_by_class", "[class:reserve,...]", "none", "per stream-class reserve, overriding expandable_segments_reserve"),
    key(C, "graph_capture_record_stream_reuse", "True/False", "False", "during CUDA-graph capture, reuse blocks freed with cross-stream uses by graph topology"),
    KeyDoc { aliases: &["pinned_use_hip_host_register"], ..key(C, "pinned_use_cuda_host_register", "True/False", "False", "host allocator: pin with malloc + cudaHostRegister instead of cudaHostAlloc") },
    key(C, "pinned_num_register_threads", "threads", "1", "host allocator: threads that pre-fault pages for cudaHostRegister (power of two <= 128)"),
    key(G, "pinned_use_background_threads", "True/False", "False", "host allocator: process events on a background thread"),
    key(C, "pinned_reserve_segment_size_mb", "MiB", "0 (off)", "host allocator: pre-reserve a pinned segment of this size for small requests"),
    key(G, "pinned_max_round_threshold_mb", "MiB", "unlimited", "host allocator: requests above this skip power-of-two rounding"),
    key(G, "pinned_max_cached_size_mb", "MiB", "unlimited", "host allocator: blocks above this are freed instead of cached"),
    key(C, "pinned_free_catch_all", "True/False", "False", "host allocator: catch-all free behaviour (recorded only)"),
    KeyDoc { cachalot_only: true, ..key(G, "expandable_oversize_exempt", "True/False", "False", "cachalot: max_split_size_mb rules do not apply to expandable blocks (torch #123548)") },
    KeyDoc { cachalot_only: true, ..key(G, "research_after_flush", "True/False", "False", "cachalot: search the cache again after the last-resort flush before allocating (torch #189504)") },
];

/// PyTorch 1.13's key that cachalot accepts (with a warning) although torch >= 2.0 rejects it
/// (the table's one `legacy` entry; a test checks they agree).
pub(crate) const LEGACY_KEY: &str = "roundup_bypass_threshold_mb";

/// The table entry of `name`, which may be one of its aliases.
pub fn lookup(name: &str) -> Option<&'static KeyDoc> {
    KEYS.iter()
        .find(|k| k.name == name || k.aliases.contains(&name))
}

/// Whether `name` is a torch 2.15 key (not the legacy one, not cachalot's) that `pass` reads.
pub(crate) fn is_pass_key(name: &str, pass: Pass) -> bool {
    lookup(name).is_some_and(|k| k.pass == pass && !k.cachalot_only && !k.legacy)
}

/// Whether `name` is a key only `CACHALOT_ALLOC_CONF` accepts.
pub(crate) fn is_cachalot_key(name: &str) -> bool {
    lookup(name).is_some_and(|k| k.cachalot_only)
}
/// The largest MiB count torch keeps (`SIZE_MAX / 1 MiB`); bigger values are clamped to it.
pub(crate) const MAX_MB: u64 = u64::MAX / MIB;

/// Why a C library number reader failed: `std::invalid_argument` (nothing to read) or
/// `std::out_of_range`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumError {
    /// No number at the start of the text.
    Invalid,
    /// The number does not fit (`ERANGE`).
    OutOfRange,
}

/// C-locale `isspace`: what torch's tokenizer drops.
pub(crate) fn c_isspace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// `std::stoull(s)`: (value, bytes used, negative). Leading whitespace and a sign are
/// accepted; a negative number wraps modulo 2^64 as `strtoull` does.
pub(crate) fn stoull(s: &str) -> Result<(u64, usize, bool), NumError> {
    let b = s.as_bytes();
    let mut p = b.iter().take_while(|c| c_isspace(char::from(**c))).count();
    let neg = b.get(p) == Some(&b'-');
    if neg || b.get(p) == Some(&b'+') {
        p += 1;
    }
    let start = p;
    let mut v: Option<u64> = Some(0);
    while let Some(d) = b.get(p).filter(|c| c.is_ascii_digit()) {
        v = v
            .and_then(|v| v.checked_mul(10))
            .and_then(|v| v.checked_add(u64::from(d - b'0')));
        p += 1;
    }
    if p == start {
        return Err(NumError::Invalid);
    }
    let v = v.ok_or(NumError::OutOfRange)?;
    Ok((if neg { v.wrapping_neg() } else { v }, p, neg))
}

fn digits(b: &[u8], mut p: usize, hex: bool) -> usize {
    while b.get(p).is_some_and(|c| {
        if hex {
            c.is_ascii_hexdigit()
        } else {
            c.is_ascii_digit()
        }
    }) {
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
pub(crate) fn stod(s: &str) -> Result<(f64, usize), NumError> {
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
    if let Some(after) = rest.strip_prefix("nan") {
        // "nan(chars)" takes the parenthesised part too, if it is well formed.
        let group = after
            .strip_prefix('(')
            .and_then(|r| r.find(')').map(|c| &r[..c]));
        let ok = |g: &str| g.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
        let n = group.filter(|g| ok(g)).map_or(3, |g| g.len() + 5);
        return Ok((f64::NAN, p + n));
    }
    if rest.starts_with("0x") {
        let q = p + 2;
        let int_end = digits(b, q, true);
        let frac_end = if b.get(int_end) == Some(&b'.') {
            digits(b, int_end + 1, true)
        } else {
            int_end
        };
        if frac_end - q - usize::from(frac_end > int_end) > 0 {
            let (v, end, inexact) = hex_float(b, q, int_end, frac_end);
            let v = sign * v;
            if v.is_infinite()
                || (v != 0.0 && v.abs() < f64::MIN_POSITIVE && inexact)
                || (v == 0.0 && inexact)
            {
                return Err(NumError::OutOfRange);
            }
            return Ok((v, end));
        }
        // "0x" without hex digits: strtod reads the "0".
        return Ok((sign * 0.0, p + 1));
    }
    let end = decimal_len(b, p).ok_or(NumError::Invalid)?;
    let text = &s[p..end];
    let v: f64 = text.parse().map_err(|_| NumError::Invalid)?;
    let mantissa = text.split(['e', 'E']).next().unwrap_or("");
    let nonzero = mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c));
    // glibc sets ERANGE on overflow and when the result is tiny after rounding (below
    // DBL_MIN even at unbounded exponent range), which for `v == DBL_MIN` needs the exact value.
    let tiny = v < f64::MIN_POSITIVE || (v == f64::MIN_POSITIVE && below_tiny_threshold(text));
    if v.is_infinite() || (nonzero && tiny) {
        return Err(NumError::OutOfRange);
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
    let digits: String = format!("{int}{frac}")
        .trim_start_matches('0')
        .chars()
        .take(1200)
        .collect();
    let dropped = int.len() + frac.len() - digits.len();
    let lead_zeros =
        format!("{int}{frac}").len() - format!("{int}{frac}").trim_start_matches('0').len();
    let exp: i64 = exp.parse().unwrap_or(0);
    let k = exp - frac.len() as i64 + (dropped - lead_zeros) as i64;
    if !(-5000..0).contains(&k) {
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
    let trim = |v: &mut Vec<u32>| {
        while v.len() > 1 && v.last() == Some(&0) {
            v.pop();
        }
    };
    trim(&mut lhs);
    trim(&mut rhs);
    (lhs.len(), lhs.iter().rev().collect::<Vec<_>>())
        < (rhs.len(), rhs.iter().rev().collect::<Vec<_>>())
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
    let (kept, exp) = if kept == 1 << 53 {
        (kept >> 1, exp + 1)
    } else {
        (kept, exp)
    };
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
    (v > 0.0 && v.is_finite()).then_some(if gib {
        ReserveSpec::GiB(v)
    } else {
        ReserveSpec::Fraction(v)
    })
}

/// `roundup_power2_divisions` as torch syntax that parses back to exactly `d`; `None` when
/// every slot is 0 (the default).
pub(crate) fn divisions_value(d: &[u64; 16]) -> Option<String> {
    if d.iter().all(|v| *v == 0) {
        return None;
    }
    if d.iter().all(|v| *v == d[0]) {
        return Some(if d[0].is_power_of_two() {
            d[0].to_string()
        } else {
            format!("[32768:{}]", d[0])
        });
    }
    // The first entry also fills the slots below it; `>` fills from the slot after the last
    // entry; slots nobody names stay 0.
    let lead = d.iter().take_while(|v| **v == d[0]).count() - 1;
    let tail = 16 - d.iter().rev().take_while(|v| **v == d[15]).count();
    let mut parts: Vec<String> = (lead..tail)
        .map(|s| format!("{}:{}", 1u64 << s, d[s]))
        .collect();
    if tail < 16 && d[15] != 0 {
        parts.push(format!(">:{}", d[15]));
    }
    Some(format!("[{}]", parts.join(",")))
}

fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(MIB) {
        (bytes / MIB).to_string()
    } else {
        format!("{bytes}B")
    }
}

fn unlimited_mib(bytes: u64) -> String {
    if bytes == u64::MAX {
        "unlimited".into()
    } else {
        mib(bytes)
    }
}

fn flag(b: bool) -> String {
    if b { "True" } else { "False" }.into()
}

/// `v` as text that `std::stod` reads back to exactly `v`: the shortest decimal, except for
/// subnormal numbers, whose decimal glibc reads with a range error (torch then rejects it);
/// those are written as exact hexadecimal floats (`0x1p-1074`).
fn float_text(v: f64) -> String {
    if v == 0.0 || v.abs() >= f64::MIN_POSITIVE || !v.is_finite() {
        return format!("{v}");
    }
    let mantissa = v.abs().to_bits() & ((1 << 52) - 1);
    let shift = mantissa.trailing_zeros();
    let sign = if v < 0.0 { "-" } else { "" };
    format!("{sign}0x{:x}p-{}", mantissa >> shift, 1074 - shift)
}

fn reserve(s: ReserveSpec) -> String {
    match s {
        ReserveSpec::Fraction(f) => format!("{f}"),
        ReserveSpec::GiB(g) => format!("{g}G"),
    }
}

impl AllocConf {
    /// Whether `garbage_collection_threshold` is active: a threshold above 0 and a memory
    /// fraction below 1 (torch 2.15 treats a fraction of exactly 1.0 as no limit, so GC stays
    /// off; the oracle confirms it).
    pub fn gc_enabled(&self) -> bool {
        self.garbage_collection_threshold > 0.0 && self.per_process_memory_fraction < 1.0
    }

    /// `roundup_power2_divisions` with the legacy `roundup_bypass_threshold_mb` folded in:
    /// 0 in every slot whose interval starts at or above the threshold. The same rounding as
    /// the bypass when the threshold is 0 or a power-of-two MiB from 2 to 32768.
    pub fn effective_divisions(&self) -> [u64; 16] {
        let mut d = self.roundup_power2_divisions;
        if self.roundup_bypass_threshold != u64::MAX {
            let t = self.roundup_bypass_threshold;
            for (slot, v) in d.iter_mut().enumerate() {
                let start = if slot == 0 { 0 } else { MIB << slot };
                if start >= t {
                    *v = 0;
                }
            }
        }
        d
    }

    /// The value of `key` in torch syntax, or `None` if it has its default.
    fn torch_value(&self, key: &str) -> Option<String> {
        let some = |b: bool, v: String| b.then_some(v);
        match key {
            "backend" => some(
                self.backend == Backend::CudaMallocAsync,
                self.backend.name().into(),
            ),
            "max_split_size_mb" => some(
                self.max_split_size != u64::MAX,
                (self.max_split_size / MIB).to_string(),
            ),
            "max_non_split_rounding_mb" => some(
                self.max_non_split_rounding_size != self.large_segment_size,
                (self.max_non_split_rounding_size / MIB).to_string(),
            ),
            "large_segment_size_mb" => some(
                self.large_segment_size != 20 * MIB,
                (self.large_segment_size / MIB).to_string(),
            ),
            "roundup_power2_divisions" => divisions_value(&self.effective_divisions()),
            "garbage_collection_threshold" => some(
                self.garbage_collection_threshold != 0.0,
                float_text(self.garbage_collection_threshold),
            ),
            "expandable_segments" => some(self.expandable_segments, flag(true)),
            "release_lock_on_cudamalloc" => some(self.release_lock_on_cudamalloc, flag(true)),
            "per_process_memory_fraction" => some(
                self.per_process_memory_fraction != 1.0,
                float_text(self.per_process_memory_fraction),
            ),
            "throw_on_cudamalloc_oom" => some(self.throw_on_cudamalloc_oom, flag(true)),
            "expandable_segments_reserve" => self.expandable_segments_reserve.map(reserve),
            "expandable_segments_reserve_by_class" => {
                let by = &self.expandable_segments_reserve_by_class;
                let items: Vec<String> = by
                    .iter()
                    .map(|(c, s)| format!("{c}:{}", reserve(*s)))
                    .collect();
                some(!by.is_empty(), format!("[{}]", items.join(",")))
            }
            "graph_capture_record_stream_reuse" => {
                some(self.graph_capture_record_stream_reuse, flag(true))
            }
            "pinned_use_cuda_host_register" => some(self.pinned_use_cuda_host_register, flag(true)),
            "pinned_num_register_threads" => some(
                self.pinned_num_register_threads != 1,
                self.pinned_num_register_threads.to_string(),
            ),
            "pinned_use_background_threads" => some(self.pinned_use_background_threads, flag(true)),
            "pinned_reserve_segment_size_mb" => some(
                self.pinned_reserve_segment_size_mb != 0,
                self.pinned_reserve_segment_size_mb.to_string(),
            ),
            "pinned_max_round_threshold_mb" => some(
                self.pinned_max_round_threshold != u64::MAX,
                (self.pinned_max_round_threshold / MIB).to_string(),
            ),
            "pinned_max_cached_size_mb" => some(
                self.pinned_max_cached_size != u64::MAX,
                (self.pinned_max_cached_size / MIB).to_string(),
            ),
            "pinned_free_catch_all" => some(self.pinned_free_catch_all, flag(true)),
            _ => None,
        }
    }

    /// A canonical `PYTORCH_CUDA_ALLOC_CONF` string naming every option that differs from its
    /// default, in [`KEYS`] order. torch 2.15 accepts it and `parse_pytorch` reads it back to
    /// this configuration. Two exceptions: cachalot's own options are left out (they belong in
    /// `CACHALOT_ALLOC_CONF`), and a legacy `roundup_bypass_threshold_mb` is written as its
    /// torch ≥ 2.0 equivalent, a `roundup_power2_divisions` list (see
    /// [`AllocConf::effective_divisions`]).
    pub fn to_pytorch_string(&self) -> String {
        // torch reads `large_segment_size_mb` from any token, the last one winning, so a
        // reserve class of that name would override it unless the key itself comes last.
        const LARGE: &str = "large_segment_size_mb";
        let by = &self.expandable_segments_reserve_by_class;
        let class_named_large = by.iter().any(|(name, _)| name == LARGE);
        let mut parts: Vec<String> = KEYS
            .iter()
            .filter(|k| !(k.cachalot_only || k.legacy || (class_named_large && k.name == LARGE)))
            .filter_map(|k| self.torch_value(k.name).map(|v| format!("{}:{v}", k.name)))
            .collect();
        if class_named_large {
            parts.push(format!("{LARGE}:{}", self.large_segment_size / MIB));
        }
        parts.join(",")
    }

    /// One line per key of [`KEYS`]: (key, value, default, meaning). Values are written in the
    /// key's unit (MiB for `*_mb` keys).
    pub fn describe(&self) -> Vec<(String, String, String, &'static str)> {
        KEYS.iter()
            .map(|k| {
                let value = match k.name {
                    "backend" if self.backend == Backend::Uncached => {
                        "native (no caching)".to_string()
                    }
                    "backend" => self.backend.name().to_string(),
                    "max_split_size_mb" => unlimited_mib(self.max_split_size),
                    "max_non_split_rounding_mb" => mib(self.max_non_split_rounding_size),
                    "large_segment_size_mb" => mib(self.large_segment_size),
                    "roundup_power2_divisions" => divisions_value(&self.roundup_power2_divisions)
                        .unwrap_or_else(|| "0".into()),
                    "roundup_bypass_threshold_mb" => unlimited_mib(self.roundup_bypass_threshold),
                    "garbage_collection_threshold" => float_text(self.garbage_collection_threshold),
                    "expandable_segments" => flag(self.expandable_segments),
                    "release_lock_on_cudamalloc" => flag(self.release_lock_on_cudamalloc),
                    "per_process_memory_fraction" => float_text(self.per_process_memory_fraction),
                    "throw_on_cudamalloc_oom" => flag(self.throw_on_cudamalloc_oom),
                    "expandable_segments_reserve" => self
                        .expandable_segments_reserve
                        .map_or_else(|| "default".into(), reserve),
                    "expandable_segments_reserve_by_class" => {
                        self.torch_value(k.name).unwrap_or_else(|| "none".into())
                    }
                    "graph_capture_record_stream_reuse" => {
                        flag(self.graph_capture_record_stream_reuse)
                    }
                    "pinned_use_cuda_host_register" => flag(self.pinned_use_cuda_host_register),
                    "pinned_num_register_threads" => self.pinned_num_register_threads.to_string(),
                    "pinned_use_background_threads" => flag(self.pinned_use_background_threads),
                    "pinned_reserve_segment_size_mb" => {
                        self.pinned_reserve_segment_size_mb.to_string()
                    }
                    "pinned_max_round_threshold_mb" => {
                        unlimited_mib(self.pinned_max_round_threshold)
                    }
                    "pinned_max_cached_size_mb" => unlimited_mib(self.pinned_max_cached_size),
                    "pinned_free_catch_all" => flag(self.pinned_free_catch_all),
                    "expandable_oversize_exempt" => flag(self.cachalot.expandable_oversize_exempt),
                    "research_after_flush" => flag(self.cachalot.research_after_flush),
                    _ => String::new(),
                };
                (k.name.to_string(), value, k.default.to_string(), k.doc)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pytorch;

    /// Issue #10, item 7: `per_process_memory_fraction:0x1p-1074` was written as a 330-digit
    /// decimal, which `stod` reads with a range error, so the canonical string did not parse.
    #[test]
    fn fractions_and_thresholds_read_back_exactly() {
        let tiny = [
            5e-324,
            1.5e-323,
            1e-310,
            2.225_073_858_507_201e-308,
            f64::MIN_POSITIVE,
        ];
        for v in tiny
            .into_iter()
            .chain([1e-300, 0.1, 0.7, 0.999_999_999_999_999_9])
        {
            for key in [
                "per_process_memory_fraction",
                "garbage_collection_threshold",
            ] {
                let mut text = format!("{key}:{}", float_text(v));
                if key == "garbage_collection_threshold" {
                    text += ",per_process_memory_fraction:0.5";
                }
                let (c, _) = parse_pytorch(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                let back = parse_pytorch(&c.to_pytorch_string())
                    .unwrap_or_else(|e| panic!("{}: {e}", c.to_pytorch_string()))
                    .0;
                assert_eq!(back, c, "{text} -> {}", c.to_pytorch_string());
            }
        }
        assert_eq!(float_text(5e-324), "0x1p-1074");
        assert_eq!(float_text(0.7), "0.7");
    }

    #[test]
    fn divisions_render_to_the_shortest_list_torch_reads_back() {
        let v = |a: &[u64]| -> [u64; 16] { a.try_into().unwrap() };
        assert_eq!(divisions_value(&[0; 16]), None);
        assert_eq!(divisions_value(&[4; 16]).as_deref(), Some("4"));
        assert_eq!(divisions_value(&[3; 16]).as_deref(), Some("[32768:3]"));
        let d = v(&[1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8]);
        assert_eq!(
            divisions_value(&d).as_deref(),
            Some("[256:1,512:2,1024:4,>:8]")
        );
        let d = v(&[8, 8, 8, 8, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(divisions_value(&d).as_deref(), Some("[8:8,16:2,32:8,64:8]"));
        let d = v(&[0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]);
        assert_eq!(divisions_value(&d).as_deref(), Some("[1:0,>:4]"));
    }

    #[test]
    fn describe_has_one_line_per_key() {
        let d = parse_pytorch("max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4],expandable_segments_reserve:40G").unwrap().0.describe();
        assert_eq!(d.len(), KEYS.len());
        let value = |k: &str| d.iter().find(|l| l.0 == k).unwrap().1.clone();
        assert_eq!(value("max_split_size_mb"), "128");
        assert_eq!(value("roundup_power2_divisions"), "[256:1,>:4]");
        assert_eq!(value("expandable_segments_reserve"), "40G");
        assert_eq!(
            (value("backend"), value("research_after_flush")),
            ("native".into(), "False".into())
        );
        assert_eq!(d[1].2, "unlimited");
        assert!(
            d.iter()
                .all(|l| !l.1.is_empty() && !l.2.is_empty() && !l.3.is_empty())
        );
    }

    /// The passes of torch 2.15 as read from its sources and the oracle; the parser takes its
    /// key lists from the table, so the table must say the same.
    #[test]
    fn keys_table_assigns_torchs_passes() {
        #[rustfmt::skip]
        let generic = [
            "large_segment_size_mb", "max_split_size_mb", "max_non_split_rounding_mb",
            "garbage_collection_threshold", "roundup_power2_divisions", "expandable_segments",
            "pinned_use_background_threads", "pinned_max_round_threshold_mb",
            "pinned_max_cached_size_mb",
        ];
        #[rustfmt::skip]
        let cuda = [
            "backend", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
            "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
            "graph_capture_record_stream_reuse", "pinned_reserve_segment_size_mb",
            "pinned_num_register_threads", "per_process_memory_fraction", "pinned_free_catch_all",
            "throw_on_cudamalloc_oom", "expandable_segments_reserve",
            "expandable_segments_reserve_by_class",
        ];
        let cachalot = ["expandable_oversize_exempt", "research_after_flush"];
        let all: Vec<&str> = KEYS
            .iter()
            .flat_map(|k| std::iter::once(k.name).chain(k.aliases.iter().copied()))
            .collect();
        for name in &all {
            assert_eq!(
                (
                    is_pass_key(name, Pass::Generic),
                    is_pass_key(name, Pass::Cuda)
                ),
                (generic.contains(name), cuda.contains(name)),
                "{name}"
            );
            assert_eq!(is_cachalot_key(name), cachalot.contains(name), "{name}");
        }
        assert_eq!(all.len(), generic.len() + cuda.len() + cachalot.len() + 1);
        let legacy: Vec<&str> = KEYS.iter().filter(|k| k.legacy).map(|k| k.name).collect();
        assert_eq!(legacy, [LEGACY_KEY]);
        assert_eq!(lookup(LEGACY_KEY).map(|k| k.pass), Some(Pass::Generic));
        assert!(
            cachalot
                .iter()
                .all(|k| lookup(k).unwrap().pass == Pass::Generic)
        );
        assert_eq!(
            lookup("release_lock_on_hipmalloc").unwrap().name,
            "release_lock_on_cudamalloc"
        );
        assert!(lookup("no_such_key").is_none());
    }

    #[test]
    fn number_readers() {
        assert_eq!(stoull("-1"), Ok((u64::MAX, 2, true)));
        assert_eq!(stoull("-18446744073709551615"), Ok((1, 21, true)));
        assert_eq!(stoull("0x30"), Ok((0, 1, false)));
        assert_eq!(stoull("-18446744073709551616"), Err(NumError::OutOfRange));
        assert_eq!(stoull("+-1"), Err(NumError::Invalid));
        assert_eq!(stod("0x1.8p1"), Ok((3.0, 7)));
        assert_eq!(stod("0xA"), Ok((10.0, 3)));
        assert_eq!(stod("1e+"), Ok((1.0, 1)));
        assert_eq!(stod("nan(abc").map(|v| v.1), Ok(3));
        assert_eq!(stod("nan(a_1)x").map(|v| v.1), Ok(8));
        assert_eq!(stod("-0x1p-1"), Ok((-0.5, 7)));
        assert_eq!(stod("0x1.fffffffffffff8p0").map(|v| v.0), Ok(2.0)); // ties to even
        assert_eq!(stod("0x1p1024"), Err(NumError::OutOfRange));
        assert_eq!(reserve_spec("+.5g"), Some(ReserveSpec::GiB(0.5)));
        assert_eq!(reserve_spec("5."), Some(ReserveSpec::Fraction(5.0)));
        assert_eq!(reserve_spec("1e"), None);
    }
}
