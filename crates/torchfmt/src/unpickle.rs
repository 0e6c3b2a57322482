//! A streaming, bounded reader for the pickles torch's `_dump_snapshot` writes.
//!
//! It runs Python's unpickling machine (a value stack, marks, a memo) over the opcodes that
//! Python's pickler emits for plain dicts, lists, tuples, strings, numbers, booleans and
//! `None` under protocols 2 to 5: MemoryViz.js's opcode set (spec §12.3) plus `BINUNICODE8`,
//! `POP`, `POP_MARK`, `DUP`, `LIST`, `DICT` and `TUPLE`. Anything else (classes, `REDUCE`,
//! bytes, sets, protocols 0 and 1) is refused with the opcode's name and byte offset.
//!
//! The input is read as a stream (a gzip decoder, a file), never whole. Values go to a
//! [`Builder`] as they are made: each new container gets the role its place on the stack
//! says it will have (Python's pickler adds a dict's items and a list's elements to it with
//! `SETITEM(S)` / `APPEND(S)` while it is on the stack, the key pushed before the value),
//! so a history entry is decoded when it is appended to its list and stack frames are
//! dropped as they are read.
//!
//! Hostile input: nothing is allocated from a length before its bytes have arrived, the
//! memo, the stack and the strings count against the builder's working-memory limit,
//! memo references share a value rather than copying it, and nothing recurses, so a
//! malformed, truncated, deeply nested or memo-bombed pickle yields an error (never a
//! panic) with memory bounded by what it decodes.

use std::io::{BufRead, ErrorKind, Read};

use rustc_hash::FxHashMap;

use crate::decode::{Builder, Kind, Role, Val};
use crate::pickle::op;
use crate::{Snapshot, SnapshotError};

/// Why a pickle could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pickle byte {offset}: {message}")]
#[non_exhaustive]
pub struct PickleError {
    /// Offset of the opcode at fault.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

type R<T> = Result<T, String>;

/// Buffered input that counts its position and says how much was left when it ran out.
struct Input<I> {
    inner: I,
    buf: Box<[u8]>,
    at: usize,
    end: usize,
    /// Bytes consumed before `buf[0]`.
    base: usize,
}

const BUF: usize = 1 << 16;

impl<I: Read> Input<I> {
    fn pos(&self) -> usize {
        self.base + self.at
    }

    /// Refills the buffer; false at the end of the input.
    fn refill(&mut self) -> R<bool> {
        if self.at < self.end {
            return Ok(true);
        }
        self.base += self.end;
        self.at = 0;
        self.end = 0;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(n) => {
                    self.end = n;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the input failed: {e}")),
            }
        }
    }

    fn byte(&mut self) -> R<Option<u8>> {
        if self.at == self.end && !self.refill()? {
            return Ok(None);
        }
        let b = self.buf[self.at];
        self.at += 1;
        Ok(Some(b))
    }

    /// Exactly `N` bytes (`Err` says how many there were).
    fn array<const N: usize>(&mut self) -> R<[u8; N]> {
        if self.end - self.at >= N {
            let a = self.buf[self.at..self.at + N].try_into().expect("N bytes");
            self.at += N;
            return Ok(a);
        }
        let mut a = [0u8; N];
        for (got, slot) in a.iter_mut().enumerate() {
            *slot = self.byte()?.ok_or_else(|| truncated(N, got))?;
        }
        Ok(a)
    }

    /// `n` bytes, passed to `f` as one slice: from the buffer when they are in it, else
    /// gathered into `scratch` as they arrive (each chunk charged to `b` first).
    fn bytes<T>(
        &mut self,
        n: usize,
        scratch: &mut Vec<u8>,
        b: &mut Builder,
        f: impl FnOnce(&mut Builder, &[u8]) -> R<T>,
    ) -> R<T> {
        if self.end - self.at >= n {
            let s = &self.buf[self.at..self.at + n];
            self.at += n;
            return f(b, s);
        }
        scratch.clear();
        while scratch.len() < n {
            if self.at == self.end && !self.refill()? {
                return Err(truncated(n, scratch.len()));
            }
            let take = (n - scratch.len()).min(self.end - self.at);
            b.charge(take)?;
            scratch.extend_from_slice(&self.buf[self.at..self.at + take]);
            self.at += take;
        }
        let r = f(b, scratch);
        b.release(scratch.len());
        scratch.clear();
        scratch.shrink_to(BUF);
        r
    }

    /// Makes sure the next `n` bytes are in the buffer; `Err` with how many there were.
    fn ensure(&mut self, n: usize) -> Result<(), usize> {
        if self.end - self.at >= n {
            return Ok(());
        }
        self.buf.copy_within(self.at..self.end, 0);
        self.base += self.at;
        self.end -= self.at;
        self.at = 0;
        if self.buf.len() < n {
            let mut grown = vec![0u8; n].into_boxed_slice();
            grown[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = grown;
        }
        while self.end < n {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(self.end),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(self.end),
            }
        }
        Ok(())
    }

    /// Skips `n` bytes; `Err` with how many there were.
    fn skip(&mut self, n: u64) -> Result<(), u64> {
        let mut left = n;
        while left > 0 {
            if self.at == self.end && !self.refill().unwrap_or(false) {
                return Err(n - left);
            }
            let take = left.min((self.end - self.at) as u64) as usize;
            self.at += take;
            left -= take as u64;
        }
        Ok(())
    }
}

fn truncated(n: usize, left: usize) -> String {
    format!("truncated: needs {n} more bytes, {left} left")
}

/// Frames up to this long are read ahead when they start, to check that they are whole.
const FRAME_CHECKED: u64 = 4 << 20;

/// The stack and the marks are charged to the builder this many entries at a time, so the
/// check stays off the common path.
const STEP: usize = 4096;

/// The memo: dense for the indices `MEMOIZE` gives (0, 1, 2, …), a map for others.
#[derive(Default)]
struct Memo {
    dense: Vec<Val>,
    sparse: FxHashMap<u32, Val>,
}

impl Memo {
    fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    fn put(&mut self, idx: u32, v: Val, b: &mut Builder) -> R<()> {
        let i = idx as usize;
        if i < self.dense.len() {
            self.dense[i] = v;
        } else if i == self.dense.len() {
            b.charge(std::mem::size_of::<Val>())?;
            self.dense.push(v);
            while let Some(next) = self.sparse.remove(&(self.dense.len() as u32)) {
                self.dense.push(next);
            }
        } else if self.sparse.insert(idx, v).is_none() {
            b.charge(2 * std::mem::size_of::<Val>())?;
        }
        Ok(())
    }

    fn get(&self, idx: u32) -> R<Val> {
        self.dense
            .get(idx as usize)
            .or_else(|| self.sparse.get(&idx))
            .copied()
            .ok_or_else(|| format!("memo entry {idx} was never stored"))
    }
}

/// The unpickling machine's state.
struct Machine<I> {
    input: Input<I>,
    b: Builder,
    stack: Vec<Val>,
    marks: Vec<usize>,
    memo: Memo,
    scratch: Vec<u8>,
    /// The buffer the items above a mark are moved into, kept for the next container (one
    /// allocation for the whole document instead of one per container).
    spare: Vec<Val>,
    /// The stack's and the marks' high-water marks, charged to the builder.
    charged_stack: usize,
    charged_marks: usize,
    /// The last FRAME opcode: its offset, length, and where it ends.
    frame: Option<(usize, u64, u64)>,
}

impl<I: Read> Machine<I> {
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push(&mut self, v: Val) -> R<()> {
        self.stack.push(v);
        if self.stack.len() > self.charged_stack {
            self.b.charge(STEP * std::mem::size_of::<Val>())?;
            self.charged_stack += STEP;
        }
        Ok(())
    }

    fn pop(&mut self) -> R<Val> {
        if self.stack.len() <= self.floor() {
            return Err("stack underflow".into());
        }
        Ok(self.stack.pop().expect("checked above"))
    }

    fn top(&self) -> R<Val> {
        if self.stack.len() <= self.floor() {
            return Err("stack underflow".into());
        }
        Ok(*self.stack.last().expect("checked above"))
    }

    /// Pops everything above the last mark, and the mark.
    fn pop_mark(&mut self) -> R<Vec<Val>> {
        let m = self.marks.pop().ok_or("no MARK before this opcode")?;
        Ok(self.pop_from(m))
    }

    /// Pops the stack down to `len` entries, into the spare buffer.
    fn pop_from(&mut self, len: usize) -> Vec<Val> {
        let mut items = std::mem::take(&mut self.spare);
        items.clear();
        items.extend_from_slice(&self.stack[len..]);
        self.stack.truncate(len);
        items
    }

    /// Keeps `items`' buffer for the next container, unless it grew large (the stack it came
    /// from is charged; the buffer kept is bounded).
    fn recycle(&mut self, items: Vec<Val>) {
        if items.capacity() <= 4096 {
            self.spare = items;
        }
    }

    /// The role a container pushed now will have: the element of a list just below it, the
    /// value of an empty dict two below it under the key between (Python's pickler uses
    /// APPEND and SETITEM so), or the next element / value of the container below the last
    /// mark (APPENDS, SETITEMS). Where both readings are possible, the one whose role takes
    /// `kind` wins.
    fn role_here(&self, kind: Kind) -> Role {
        let i = self.stack.len();
        if i == 0 {
            return Role::Root;
        }
        let floor = self.floor();
        let direct = if i > floor {
            match self.b.list_info(self.stack[i - 1]) {
                Some((role, len)) => Some(role.elem(len)),
                None if i >= floor + 2 => match self.b.dict_info(self.stack[i - 2]) {
                    Some((role, true)) => match self.stack[i - 1] {
                        Val::Str(_) => Some(role.key(self.b.code_of(self.stack[i - 1]))),
                        _ => None,
                    },
                    _ => None,
                },
                None => None,
            }
        } else {
            None
        };
        let marked = if floor >= 1 {
            let parent = self.stack[floor - 1];
            let above = (i - floor) as u64;
            if let Some((role, len)) = self.b.list_info(parent) {
                Some(role.elem(len + above))
            } else if let Some((role, _)) = self.b.dict_info(parent) {
                match self.stack[i - 1] {
                    Val::Str(_) if above % 2 == 1 => {
                        Some(role.key(self.b.code_of(self.stack[i - 1])))
                    }
                    _ => Some(Role::Skip),
                }
            } else {
                None
            }
        } else {
            None
        };
        match (direct, marked) {
            (Some(d), Some(m)) => {
                if d != Role::Skip && d.accepts(kind) {
                    d
                } else if m.accepts(kind) {
                    m
                } else {
                    d
                }
            }
            (Some(r), None) | (None, Some(r)) => r,
            (None, None) => Role::Skip,
        }
    }

    fn open(&mut self, kind: Kind) -> R<Val> {
        let role = self.role_here(kind);
        self.b.open(role, kind)
    }

    /// A container of `kind` made from `items` (LIST, TUPLE…, DICT).
    fn build(&mut self, kind: Kind, items: Vec<Val>) -> R<()> {
        let c = self.open(kind)?;
        if kind == Kind::Dict {
            self.set_items(c, &items)?;
        } else if c != Val::Skip(kind) {
            for &item in &items {
                self.b.add(c, item);
            }
        }
        self.recycle(items);
        let c = if kind == Kind::Tuple {
            self.b.seal(c)?
        } else {
            c
        };
        self.push(c)
    }

    fn set_items(&mut self, dict: Val, items: &[Val]) -> R<()> {
        if !items.len().is_multiple_of(2) {
            return Err(format!("odd number of items ({}) for a dict", items.len()));
        }
        for kv in items.chunks_exact(2) {
            let code = self.b.code_of(kv[0]);
            self.b.set_item(dict, code, kv[1])?;
        }
        Ok(())
    }

    fn string(&mut self, n: usize) -> R<()> {
        let v = self
            .input
            .bytes(n, &mut self.scratch, &mut self.b, |b, raw| {
                let s = std::str::from_utf8(raw)
                    .map_err(|e| format!("string of {n} bytes is not valid UTF-8: {e}"))?;
                b.string(s)
            })?;
        self.push(v)
    }

    fn memo_put(&mut self, idx: u32) -> R<()> {
        let v = self.top()?;
        self.memo.put(idx, v, &mut self.b)
    }

    fn memo_get(&mut self, idx: u32) -> R<()> {
        let v = self.memo.get(idx)?;
        self.push(v)
    }

    /// At STOP: the input must hold the whole of the last frame, as Python's unpickler
    /// reads a frame whole when it starts.
    fn check_frame(&mut self) -> Result<(), PickleError> {
        let Some((at, n, end)) = self.frame else {
            return Ok(());
        };
        let pos = self.input.pos() as u64;
        if end <= pos {
            return Ok(());
        }
        match self.input.skip(end - pos) {
            Ok(()) => Ok(()),
            Err(got) => Err(PickleError {
                offset: at,
                message: format!(
                    "truncated: a frame of {n} bytes starts here, {} bytes left",
                    pos - (at as u64 + 9) + got
                ),
            }),
        }
    }

    /// Runs one opcode; `Ok(Some(root))` at STOP.
    fn step(&mut self, code: u8) -> R<Option<Val>> {
        match code {
            op::PROTO => {
                let v = self.input.array::<1>()?[0];
                if !(2..=5).contains(&v) {
                    return Err(format!(
                        "pickle protocol {v}: only protocols 2 to 5 are read"
                    ));
                }
            }
            op::FRAME => {
                let at = self.input.pos() - 1;
                let n = u64::from_le_bytes(self.input.array::<8>()?);
                // Python's unpickler reads a frame whole when it starts; frames of the
                // usual size (64 KiB) are checked so here, longer ones at STOP.
                if n <= FRAME_CHECKED
                    && let Err(left) = self.input.ensure(n as usize)
                {
                    return Err(format!(
                        "truncated: a frame of {n} bytes starts here, {left} bytes left"
                    ));
                }
                self.frame = Some((at, n, (self.input.pos() as u64).saturating_add(n)));
            }
            op::STOP => return self.pop().map(Some),
            op::MARK => {
                self.marks.push(self.stack.len());
                if self.marks.len() > self.charged_marks {
                    self.b.charge(STEP * std::mem::size_of::<usize>())?;
                    self.charged_marks += STEP;
                }
            }
            op::POP => {
                if self.stack.len() == self.marks.last().copied().unwrap_or(usize::MAX) {
                    self.marks.pop();
                } else {
                    self.pop()?;
                }
            }
            op::POP_MARK => {
                let items = self.pop_mark()?;
                self.recycle(items);
            }
            op::DUP => {
                let t = self.top()?;
                self.push(t)?;
            }
            op::EMPTY_DICT => {
                let v = self.open(Kind::Dict)?;
                self.push(v)?;
            }
            op::EMPTY_LIST => {
                let v = self.open(Kind::List)?;
                self.push(v)?;
            }
            op::EMPTY_TUPLE => {
                let v = self.open(Kind::Tuple)?;
                self.push(v)?;
            }
            op::DICT => {
                let items = self.pop_mark()?;
                self.build(Kind::Dict, items)?;
            }
            op::LIST => {
                let items = self.pop_mark()?;
                self.build(Kind::List, items)?;
            }
            op::TUPLE => {
                let items = self.pop_mark()?;
                self.build(Kind::Tuple, items)?;
            }
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let n = (code - op::TUPLE1 + 1) as usize;
                if self.stack.len() < self.floor() + n {
                    return Err("stack underflow".into());
                }
                let items = self.pop_from(self.stack.len() - n);
                self.build(Kind::Tuple, items)?;
            }
            op::SETITEM => {
                let v = self.pop()?;
                let k = self.pop()?;
                let d = self.top()?;
                self.set_items(d, &[k, v])?;
            }
            op::SETITEMS => {
                let items = self.pop_mark()?;
                let d = self.top()?;
                self.set_items(d, &items)?;
                self.recycle(items);
            }
            op::APPEND => {
                let v = self.pop()?;
                let l = self.top()?;
                self.b.append(l, v)?;
            }
            op::APPENDS => {
                // Most lists of a snapshot (stack frames) are not read: their elements are
                // dropped where they lie, without a copy.
                if let Some(&m) = self.marks.last()
                    && m > self.marks.iter().rev().nth(1).copied().unwrap_or(0)
                    && self.stack[m - 1] == Val::Skip(Kind::List)
                {
                    self.marks.pop();
                    self.stack.truncate(m);
                    return Ok(None);
                }
                let items = self.pop_mark()?;
                let l = self.top()?;
                for &v in &items {
                    self.b.append(l, v)?;
                }
                self.recycle(items);
            }
            op::NONE => self.push(Val::None)?,
            op::NEWTRUE => self.push(Val::Bool(true))?,
            op::NEWFALSE => self.push(Val::Bool(false))?,
            op::BININT => {
                let v = i32::from_le_bytes(self.input.array::<4>()?);
                self.push(Val::Int(v.into()))?;
            }
            op::BININT1 => {
                let v = self.input.array::<1>()?[0];
                self.push(Val::Int(v.into()))?;
            }
            op::BININT2 => {
                let v = u16::from_le_bytes(self.input.array::<2>()?);
                self.push(Val::Int(v.into()))?;
            }
            op::LONG1 => {
                let n = self.input.array::<1>()?[0] as usize;
                let v = self
                    .input
                    .bytes(n, &mut self.scratch, &mut self.b, |b, raw| {
                        if n > 16 {
                            return Err(format!("integer of {n} bytes is too large (at most 16)"));
                        }
                        let fill = if raw.last().is_some_and(|b| b & 0x80 != 0) {
                            0xff
                        } else {
                            0
                        };
                        let mut bytes = [fill; 16];
                        bytes[..n].copy_from_slice(raw);
                        b.int(i128::from_le_bytes(bytes))
                    })?;
                self.push(v)?;
            }
            op::BINFLOAT => {
                let v = f64::from_be_bytes(self.input.array::<8>()?);
                self.push(Val::Float(v))?;
            }
            op::SHORT_BINUNICODE => {
                let n = self.input.array::<1>()?[0] as usize;
                self.string(n)?;
            }
            op::BINUNICODE => {
                let n = u32::from_le_bytes(self.input.array::<4>()?) as usize;
                self.string(n)?;
            }
            op::BINUNICODE8 => {
                let n = u64::from_le_bytes(self.input.array::<8>()?);
                let n = usize::try_from(n).map_err(|_| format!("string of {n} bytes"))?;
                self.string(n)?;
            }
            op::MEMOIZE => {
                let idx = u32::try_from(self.memo.len()).map_err(|_| "memo overflow")?;
                self.memo_put(idx)?;
            }
            op::BINPUT => {
                let idx = self.input.array::<1>()?[0];
                self.memo_put(idx.into())?;
            }
            op::LONG_BINPUT => {
                let idx = u32::from_le_bytes(self.input.array::<4>()?);
                self.memo_put(idx)?;
            }
            op::BINGET => {
                let idx = self.input.array::<1>()?[0];
                self.memo_get(idx.into())?;
            }
            op::LONG_BINGET => {
                let idx = u32::from_le_bytes(self.input.array::<4>()?);
                self.memo_get(idx)?;
            }
            other => {
                return Err(format!(
                    "opcode {} is not read here (a torch snapshot holds only dicts, lists, \
                     tuples, strings, numbers, booleans and None)",
                    opcode_name(other)
                ));
            }
        }
        Ok(None)
    }
}

/// A readable name for an opcode byte.
fn opcode_name(code: u8) -> String {
    let name = match code {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'i' => "INST",
        b'o' => "OBJ",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x8e => "BINBYTES8",
        0x96 => "BYTEARRAY8",
        0x8b => "LONG4",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        b'I' => "INT",
        b'L' => "LONG",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'V' => "UNICODE",
        b'p' => "PUT",
        b'g' => "GET",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return format!("0x{code:02x}"),
    };
    format!("{name} (0x{code:02x})")
}

/// Reads a snapshot pickle from a stream.
pub fn read_pickle(input: impl BufRead) -> Result<Snapshot, SnapshotError> {
    let (b, root) = run(input, |_| {})?;
    b.finish(root)
}

/// The distinct opcodes a pickle uses (it must also read without error): to check that a
/// pickle stays within MemoryViz.js's set.
pub fn opcodes_used(data: &[u8]) -> Result<std::collections::BTreeSet<u8>, PickleError> {
    let mut seen = std::collections::BTreeSet::new();
    run(data, |code| {
        seen.insert(code);
    })?;
    Ok(seen)
}

fn run(input: impl Read, mut on_opcode: impl FnMut(u8)) -> Result<(Builder, Val), PickleError> {
    let mut m = Machine {
        input: Input {
            inner: input,
            buf: vec![0u8; BUF].into_boxed_slice(),
            at: 0,
            end: 0,
            base: 0,
        },
        b: Builder::default(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Memo::default(),
        spare: Vec::new(),
        scratch: Vec::new(),
        charged_stack: 0,
        charged_marks: 0,
        frame: None,
    };
    let fail = |offset, message| PickleError { offset, message };
    loop {
        let at = m.input.pos();
        let code = match m.input.byte() {
            Ok(Some(c)) => c,
            Ok(None) if at == 0 => {
                return Err(fail(0, "empty input: not a pickle".to_string()));
            }
            Ok(None) => {
                return Err(fail(at, "truncated: ended before the STOP opcode".into()));
            }
            Err(message) => return Err(fail(at, message)),
        };
        if at == 0 && code != op::PROTO {
            return Err(fail(
                0,
                "does not start with the PROTO opcode (0x80): not a pickle of protocol 2 or \
                 later"
                    .into(),
            ));
        }
        on_opcode(code);
        match m.step(code) {
            Ok(Some(root)) => {
                m.check_frame()?;
                return Ok((m.b, root));
            }
            Ok(None) => {}
            Err(message) => return Err(fail(at, message)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(data: &[u8]) -> PickleError {
        match run(data, |_| {}) {
            Ok(_) => panic!("accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn errors_name_the_offset_and_the_problem() {
        let e = err(b"\x80\x04X\xff\xff\xff\x7fab");
        assert_eq!(e.offset, 2);
        assert!(e.message.contains("truncated"), "{e}");
        let e = err(b"\x80\x04cos\nsystem\n");
        assert!(e.message.contains("GLOBAL"), "{e}");
        let e = err(b"\x80\x01N.");
        assert!(e.message.contains("protocol 1"), "{e}");
        let e = err(b"{\"a\": 1}");
        assert_eq!(e.offset, 0);
        let e = err(b"\x80\x04e.");
        assert!(e.message.contains("MARK"), "{e}");
        let e = err(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00N.");
        assert_eq!(e.offset, 2, "{e}");
        assert!(e.message.contains("a frame of 16 bytes"), "{e}");
    }

    #[test]
    fn elements_appended_to_a_list_not_read_are_dropped_as_one_by_one() {
        // One entry with two frames: by APPENDS (dropped where they lie) as by two APPENDs.
        let doc = |frames: &[u8]| {
            let mut p = b"\x80\x04}(\x8c\x08segments]\x8c\rdevice_traces]](}(".to_vec();
            p.extend(b"\x8c\x06action\x8c\x05alloc\x8c\x04addrK\x01\x8c\x04sizeM\x00\x02");
            p.extend(b"\x8c\x06streamK\x00\x8c\x06frames");
            p.extend(frames);
            p.extend(b"ueau.");
            p
        };
        let frame = b"}(\x8c\x04name\x8c\x01f\x8c\x04lineK\x07u";
        let batched = [&b"]("[..], frame, frame, b"e"].concat();
        let single = [&b"]"[..], frame, b"a", frame, b"a"].concat();
        let a = read_pickle(&doc(&batched)[..]).unwrap();
        assert_eq!(a, read_pickle(&doc(&single)[..]).unwrap());
        assert_eq!(a.device_traces[0].entries[0].size, 512);
        // A second mark right above the first: nothing below it to append to.
        let e = err(&doc(&[&b"](("[..], frame, b"e"].concat()));
        assert!(e.message.contains("stack underflow"), "{e}");
        // No mark of its own: the entry's mark is taken, and the entry is not a list.
        let e = err(&doc(&[&b"]"[..], frame, b"e"].concat()));
        assert!(e.message.contains("to a dict, not a list"), "{e}");
    }

    #[test]
    fn memo_references_share_strings_and_numbers_read_as_python_reads_them() {
        // pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr":
        // 2**40, "size": 512, "stream": 0}, {"action": "alloc", "addr": 2**64 - 1,
        // "size": 1, "stream": 0}]]}, protocol=4), strings memoized
        let mut p =
            b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\rdevice_traces\x94]\x94]\x94(".to_vec();
        p.extend(b"}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94\x8a\x06\x00\x00\x00\x00\x00\x01");
        p.extend(b"\x8c\x04size\x94M\x00\x02\x8c\x06stream\x94K\x00u");
        p.extend(b"}\x94(h\x07h\x08h\x09\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00h\x0aK\x01h\x0bK\x00u");
        p.extend(b"eau.");
        let snap = read_pickle(&p[..]).unwrap();
        let e = &snap.device_traces[0].entries;
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].addr, e[0].size), (1 << 40, 512));
        assert_eq!((e[1].addr, e[1].size), (u64::MAX, 1));
    }
}
