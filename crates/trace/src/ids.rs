//! Pointer and stream ids: parsing and interning.
//!
//! An RMM log names allocations and streams by *id tokens*, not addresses the
//! replay could use. A token is `0x` hex, decimal, or any other text, and
//! `(nil)`, `nullptr` and `NULL` mean 0 (see [`parse_u64`] for the exact number
//! syntax, which mirrors the oracle's `strtoull`).
//!
//! Every token becomes a compact `u64` key:
//!
//! - a number below 2^63 is its own key, so `0x10` and `16` are the same id
//!   and no lookup happens on the hot path;
//! - any other token (text, or a number of 2^63 or more) is *interned*: the
//!   [`IdTable`] hands it the key `2^63 | n`, `n` counting distinct interned
//!   tokens from 0. Interned keys therefore never collide with numeric keys nor
//!   with each other, and [`IdTable::resolve`] gives the token back.
//!
//! Key 0 is the null pointer id and the default stream.

use std::fmt;

use rustc_hash::FxHashMap;

/// Bit set on every interned key (tokens that are not numbers below 2^63).
pub const INTERNED_BIT: u64 = 1 << 63;

/// The id of an allocation in the trace (the `Pointer` column).
///
/// Equal tokens give equal ids within one reader; so do two spellings of the
/// same number (`0x10` and `16`). The null spellings `(nil)`, `nullptr`,
/// `NULL` and the number 0 all give [`PtrId::NULL`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PtrId(u64);

/// The id of a stream in the trace (the `Stream` column).
///
/// [`StreamKey::DEFAULT`] (key 0) is the default (null) stream; it is also
/// what a row without a Stream column gets.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StreamKey(u64);

macro_rules! id_methods {
    ($t:ident) => {
        impl $t {
            /// Builds an id from its raw key (as returned by [`Self::raw`]).
            #[inline]
            pub const fn from_raw(raw: u64) -> Self {
                Self(raw)
            }

            /// The raw `u64` key: the number itself for numbers below 2^63,
            /// `2^63 | n` for the `n`-th interned token.
            #[inline]
            pub const fn raw(self) -> u64 {
                self.0
            }

            /// The numeric value when the token was a number below 2^63
            /// (or a null spelling, which is 0); `None` for an interned token
            /// (use [`IdTable::resolve`] to see it).
            #[inline]
            pub const fn number(self) -> Option<u64> {
                if self.0 & INTERNED_BIT == 0 {
                    Some(self.0)
                } else {
                    None
                }
            }

            /// True for an interned token (see [`IdTable`]).
            #[inline]
            pub const fn is_interned(self) -> bool {
                self.0 & INTERNED_BIT != 0
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.number() {
                    Some(n) => write!(f, "{}({n:#x})", stringify!($t)),
                    None => write!(f, "{}(#{})", stringify!($t), self.0 & !INTERNED_BIT),
                }
            }
        }
    };
}

id_methods!(PtrId);
id_methods!(StreamKey);

impl PtrId {
    /// The null pointer id (0, `(nil)`, `nullptr`, `NULL`).
    pub const NULL: PtrId = PtrId(0);
}

impl StreamKey {
    /// The default (null) stream: 0, or a row without a Stream column.
    pub const DEFAULT: StreamKey = StreamKey(0);

    /// True for the default stream.
    #[inline]
    pub const fn is_default(self) -> bool {
        self.0 == 0
    }
}

/// What an interned or numeric key stands for (see [`IdTable::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdName<'a> {
    /// A number (decimal or `0x` hex in the trace; null spellings are 0).
    Number(u64),
    /// Any other token, as it appeared (trimmed) in the trace.
    Token(&'a [u8]),
}

impl fmt::Display for IdName<'_> {
    /// Numbers in `0x` hex, tokens as (lossy UTF-8) text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdName::Number(n) => write!(f, "{n:#x}"),
            IdName::Token(t) => f.write_str(&String::from_utf8_lossy(t)),
        }
    }
}

/// Stored form of an interned key.
#[derive(Debug, Clone)]
enum Interned {
    Big(u64),
    Token(Box<[u8]>),
}

/// Maps id tokens to compact keys; one table per reader, shared by the
/// Pointer and Stream columns.
///
/// Only tokens that are not numbers below 2^63 are stored, so a normal trace
/// (hex or decimal ids) keeps this table empty.
#[derive(Debug, Default, Clone)]
pub struct IdTable {
    tokens: FxHashMap<Box<[u8]>, u64>,
    bigs: FxHashMap<u64, u64>,
    names: Vec<Interned>,
}

impl IdTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of interned tokens.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when nothing has been interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The key of an id token (already trimmed).
    #[inline]
    pub fn key(&mut self, token: &[u8]) -> u64 {
        if let Some(v) = parse_u64(token) {
            if v & INTERNED_BIT == 0 {
                return v;
            }
            return self.intern_big(v);
        }
        match token {
            b"(nil)" | b"nullptr" | b"NULL" => 0,
            _ => self.intern_token(token),
        }
    }

    /// The pointer id of a token.
    #[inline]
    pub fn ptr(&mut self, token: &[u8]) -> PtrId {
        PtrId(self.key(token))
    }

    /// The stream key of a token.
    #[inline]
    pub fn stream(&mut self, token: &[u8]) -> StreamKey {
        StreamKey(self.key(token))
    }

    /// What a key stands for; `None` for an interned key this table never
    /// handed out.
    pub fn resolve(&self, raw: u64) -> Option<IdName<'_>> {
        if raw & INTERNED_BIT == 0 {
            return Some(IdName::Number(raw));
        }
        let idx = usize::try_from(raw & !INTERNED_BIT).ok()?;
        Some(match self.names.get(idx)? {
            Interned::Big(v) => IdName::Number(*v),
            Interned::Token(t) => IdName::Token(t),
        })
    }

    fn next_key(&self) -> u64 {
        INTERNED_BIT | self.names.len() as u64
    }

    #[cold]
    fn intern_big(&mut self, v: u64) -> u64 {
        if let Some(&k) = self.bigs.get(&v) {
            return k;
        }
        let k = self.next_key();
        self.bigs.insert(v, k);
        self.names.push(Interned::Big(v));
        k
    }

    #[cold]
    fn intern_token(&mut self, token: &[u8]) -> u64 {
        if let Some(&k) = self.tokens.get(token) {
            return k;
        }
        let k = self.next_key();
        self.tokens.insert(token.into(), k);
        self.names.push(Interned::Token(token.into()));
        k
    }
}

/// Result of [`parse_number`]: why a field is not a `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NumberError {
    /// Not a number at all (empty, bad digit, trailing text).
    Invalid,
    /// A well-formed number larger than `u64::MAX`.
    Overflow,
}

/// Parses a Size or numeric id field exactly as the oracle does.
///
/// The oracle calls C's `strtoull` with base 16 after a leading `0x`/`0X`
/// (when more follows it) and base 10 otherwise, and accepts the result only
/// if digits were read up to the end of the field. This reproduces it on
/// bytes, quirks included, so that every field the oracle accepts is read the
/// same way:
///
/// - decimal (`4096`, leading zeros allowed) and `0x` hex (`0x1000`, `0X1f`);
/// - leading `\x0b` / `\x0c` (whitespace the field trimming keeps) are skipped,
///   then one optional sign: `+5` is 5, `-1` wraps to `u64::MAX` (as
///   `strtoull` does);
/// - after `0x` another `0x` prefix is accepted (`0x0x10` is 16);
/// - a NUL byte ends the field (C strings);
/// - a value above `u64::MAX` is [`NumberError::Overflow`].
pub fn parse_number(s: &[u8]) -> Result<u64, NumberError> {
    if s.is_empty() {
        return Err(NumberError::Invalid);
    }
    let (base, mut p) = if s.len() > 2 && s[0] == b'0' && (s[1] == b'x' || s[1] == b'X') {
        (16u32, &s[2..])
    } else {
        (10u32, s)
    };
    // Fast path: plain digits to the end (nearly every real field).
    if let Some(v) = if base == 10 { fast_dec(s) } else { fast_hex(p) } {
        return Ok(v);
    }
    // General path: strtoull semantics.
    while let [b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r', rest @ ..] = p {
        p = rest;
    }
    let mut neg = false;
    if let [sign @ (b'+' | b'-'), rest @ ..] = p {
        neg = *sign == b'-';
        p = rest;
    }
    if base == 16 && matches!(p, [b'0', b'x' | b'X', d, ..] if d.is_ascii_hexdigit()) {
        p = &p[2..];
    }
    let mut value: u64 = 0;
    let mut overflow = false;
    let mut ndigits = 0usize;
    for &b in p {
        let d = match b {
            b'0'..=b'9' => u64::from(b - b'0'),
            b'a'..=b'f' | b'A'..=b'F' if base == 16 => hex_val(b),
            _ => break,
        };
        ndigits += 1;
        match value
            .checked_mul(u64::from(base))
            .and_then(|v| v.checked_add(d))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
    }
    if ndigits == 0 {
        return Err(NumberError::Invalid);
    }
    match p.get(ndigits) {
        None | Some(0) => {}
        Some(_) => return Err(NumberError::Invalid),
    }
    if overflow {
        return Err(NumberError::Overflow);
    }
    Ok(if neg { value.wrapping_neg() } else { value })
}

/// [`parse_number`] as an `Option`.
#[inline]
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    parse_number(s).ok()
}

/// Up to 19 decimal digits and nothing else (cannot overflow).
#[inline]
fn fast_dec(s: &[u8]) -> Option<u64> {
    if s.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

/// 1 to 16 hex digits and nothing else (cannot overflow).
#[inline]
fn fast_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

#[inline]
fn hex_val(b: u8) -> u64 {
    u64::from(match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_u64_round_trips(v in any::<u64>()) {
            prop_assert_eq!(parse_u64(v.to_string().as_bytes()), Some(v));
            prop_assert_eq!(parse_u64(format!("{v:#x}").as_bytes()), Some(v));
            prop_assert_eq!(parse_u64(format!("0X{v:X}").as_bytes()), Some(v));
            prop_assert_eq!(parse_u64(format!("0x{v:032x}").as_bytes()), Some(v));
            prop_assert_eq!(parse_u64(format!("{v:025}").as_bytes()), Some(v));
        }

        #[test]
        fn long_decimals_agree_with_u128(digits in "[0-9]{1,30}") {
            let want = digits.parse::<u128>().unwrap();
            let got = parse_number(digits.as_bytes());
            match u64::try_from(want) {
                Ok(v) => prop_assert_eq!(got, Ok(v)),
                Err(_) => prop_assert_eq!(got, Err(NumberError::Overflow)),
            }
        }

        #[test]
        fn keys_are_distinct_exactly_when_tokens_differ(
            toks in proptest::collection::vec(
                prop_oneof!["[0-9]{1,21}", "0x[0-9a-f]{1,17}", "[a-z(]{1,4}", Just(String::new())],
                1..30,
            )
        ) {
            let mut t = IdTable::new();
            let keys: Vec<u64> = toks.iter().map(|s| t.key(s.as_bytes())).collect();
            for (a, ka) in toks.iter().zip(&keys) {
                let name = t.resolve(*ka).unwrap();
                for (b, kb) in toks.iter().zip(&keys) {
                    prop_assert_eq!(ka == kb, name == t.resolve(*kb).unwrap(), "{} {}", a, b);
                }
            }
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"4096"), Some(4096));
        assert_eq!(parse_u64(b"007"), Some(7));
        assert_eq!(parse_u64(b"0x10"), Some(16));
        assert_eq!(parse_u64(b"0X1f"), Some(31));
        assert_eq!(parse_u64(b"0xFFFFFFFFFFFFFFFF"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(
            parse_number(b"18446744073709551616"),
            Err(NumberError::Overflow)
        );
        assert_eq!(
            parse_number(b"0x10000000000000000"),
            Err(NumberError::Overflow)
        );
        assert_eq!(parse_number(b""), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"abc"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"0x"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"0xg"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"12a"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"1.5"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"-"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"1 2"), Err(NumberError::Invalid));
        // strtoull quirks the oracle inherits.
        assert_eq!(parse_u64(b"+5"), Some(5));
        assert_eq!(parse_u64(b"-1"), Some(u64::MAX));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"0x-1"), Some(u64::MAX));
        assert_eq!(parse_u64(b"0x0x10"), Some(16));
        assert_eq!(parse_number(b"0x0x"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"-0x5"), Err(NumberError::Invalid));
        assert_eq!(parse_u64(b"\x0b7"), Some(7));
        assert_eq!(parse_number(b"7\x0b"), Err(NumberError::Invalid));
        assert_eq!(parse_u64(b"12\0junk"), Some(12));
        assert_eq!(parse_number(b"\0"), Err(NumberError::Invalid));
        assert_eq!(parse_number(b"0x\0"), Err(NumberError::Invalid));
    }

    #[test]
    fn keys() {
        let mut t = IdTable::new();
        assert_eq!(t.key(b"16"), 16);
        assert_eq!(t.key(b"0x10"), 16);
        for nil in [&b"(nil)"[..], b"nullptr", b"NULL", b"0", b"0x0"] {
            assert_eq!(t.ptr(nil), PtrId::NULL);
            assert!(t.stream(nil).is_default());
        }
        assert!(t.is_empty());
        // Case matters for the null spellings: `null` is a token.
        let null = t.key(b"null");
        assert!(null & INTERNED_BIT != 0);
        let a = t.key(b"abc");
        assert_ne!(a, null);
        assert_eq!(t.key(b"abc"), a);
        // Big numbers are interned, distinct from tokens and small numbers.
        let big = t.key(b"0x8000000000000000");
        assert_eq!(t.key(b"9223372036854775808"), big);
        assert_ne!(big, INTERNED_BIT);
        assert_eq!(t.len(), 3);
        assert_eq!(t.resolve(a), Some(IdName::Token(b"abc")));
        assert_eq!(t.resolve(big), Some(IdName::Number(1 << 63)));
        assert_eq!(t.resolve(5), Some(IdName::Number(5)));
        assert_eq!(t.resolve(INTERNED_BIT | 99), None);
        assert_eq!(t.resolve(a).unwrap().to_string(), "abc");
        assert_eq!(t.resolve(big).unwrap().to_string(), "0x8000000000000000");
        // Empty token is a token too (the oracle hashes it).
        let e = t.key(b"");
        assert!(e & INTERNED_BIT != 0);
        assert_eq!(PtrId::from_raw(a).number(), None);
        assert!(PtrId::from_raw(a).is_interned());
        assert_eq!(PtrId::from_raw(7).number(), Some(7));
        assert_eq!(format!("{:?}", PtrId::from_raw(16)), "PtrId(0x10)");
        assert_eq!(format!("{:?}", StreamKey::from_raw(a)), "StreamKey(#1)");
    }
}
