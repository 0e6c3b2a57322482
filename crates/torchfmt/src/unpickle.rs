//! A bounded reader for the pickles torch's `_dump_snapshot` writes.
//!
//! It runs Python's unpickling machine (a value stack, marks, a memo) over the opcodes that
//! Python's pickler emits for plain dicts, lists, tuples, strings, numbers, booleans and
//! `None` under protocols 2 to 5: MemoryViz.js's opcode set (spec §12.3) plus `BINUNICODE8`,
//! `POP`, `POP_MARK` and `DUP`. Anything else (classes, `REDUCE`, bytes, sets, protocols 0
//! and 1) is refused with the opcode's name and byte offset.
//!
//! Hostile input: every length is checked against the bytes left before anything is
//! allocated, each opcode adds at most one node to the [`Tree`], memo references share the
//! node rather than copying it, and nothing recurses, so a malformed, truncated or deeply
//! nested pickle yields an error (never a panic) and memory stays proportional to its size.

use std::borrow::Cow;

use rustc_hash::FxHashMap;

use crate::pickle::op;
use crate::tree::{Node, NodeId, Tree};

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

/// The unpickling machine's state.
struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    tree: Tree<'a>,
    stack: Vec<NodeId>,
    marks: Vec<usize>,
    memo: FxHashMap<u32, NodeId>,
}

type R<T> = Result<T, String>;

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if self.data.len() - self.pos < n {
            return Err(format!(
                "truncated: needs {n} more bytes, {} left",
                self.data.len() - self.pos
            ));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> R<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> R<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> R<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn push(&mut self, n: Node<'a>) {
        let id = self.tree.push(n);
        self.stack.push(id);
    }

    fn pop(&mut self) -> R<NodeId> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err("stack underflow".into());
        }
        Ok(self.stack.pop().expect("checked above"))
    }

    fn top(&self) -> R<NodeId> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err("stack underflow".into());
        }
        Ok(*self.stack.last().expect("checked above"))
    }

    /// Pops everything above the last mark, and the mark.
    fn pop_mark(&mut self) -> R<Vec<NodeId>> {
        let m = self.marks.pop().ok_or("no MARK before this opcode")?;
        Ok(self.stack.split_off(m))
    }

    fn string(&mut self, n: usize) -> R<()> {
        let raw = self.take(n)?;
        let s = std::str::from_utf8(raw)
            .map_err(|e| format!("string of {n} bytes is not valid UTF-8: {e}"))?;
        self.push(Node::Str(Cow::Borrowed(s)));
        Ok(())
    }

    fn memo_get(&mut self, idx: u32) -> R<()> {
        let id = *self
            .memo
            .get(&idx)
            .ok_or_else(|| format!("memo entry {idx} was never stored"))?;
        self.stack.push(id);
        Ok(())
    }

    fn memo_put(&mut self, idx: u32) -> R<()> {
        let id = self.top()?;
        self.memo.insert(idx, id);
        Ok(())
    }

    fn append(&mut self, list: NodeId, items: Vec<NodeId>) -> R<()> {
        match self.tree.get_mut(list) {
            Node::List(v) => {
                v.extend(items);
                Ok(())
            }
            other => Err(format!("APPEND(S) to a {}, not a list", other.type_name())),
        }
    }

    fn set_items(&mut self, dict: NodeId, items: Vec<NodeId>) -> R<()> {
        if !items.len().is_multiple_of(2) {
            return Err(format!("odd number of items ({}) for a dict", items.len()));
        }
        match self.tree.get_mut(dict) {
            Node::Dict(v) => {
                v.extend(items.chunks_exact(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            other => Err(format!("SETITEM(S) on a {}, not a dict", other.type_name())),
        }
    }

    /// Runs one opcode; `Ok(Some(root))` at STOP.
    fn step(&mut self) -> R<Option<NodeId>> {
        let code = self.u8()?;
        match code {
            op::PROTO => {
                let v = self.u8()?;
                if !(2..=5).contains(&v) {
                    return Err(format!(
                        "pickle protocol {v}: only protocols 2 to 5 are read"
                    ));
                }
            }
            op::FRAME => {
                let n = self.u64()?;
                let left = self.data.len() - self.pos;
                if n > left as u64 {
                    return Err(format!(
                        "truncated: a frame of {n} bytes starts here, {left} bytes left"
                    ));
                }
            }
            op::STOP => return self.pop().map(Some),
            op::MARK => self.marks.push(self.stack.len()),
            op::POP => {
                if self.stack.len() == self.marks.last().copied().unwrap_or(usize::MAX) {
                    self.marks.pop();
                } else {
                    self.pop()?;
                }
            }
            op::POP_MARK => {
                self.pop_mark()?;
            }
            op::DUP => {
                let t = self.top()?;
                self.stack.push(t);
            }
            op::EMPTY_DICT => self.push(Node::Dict(Vec::new())),
            op::EMPTY_LIST => self.push(Node::List(Vec::new())),
            op::EMPTY_TUPLE => self.push(Node::Tuple(Vec::new())),
            op::DICT => {
                let items = self.pop_mark()?;
                let id = self.tree.push(Node::Dict(Vec::new()));
                self.set_items(id, items)?;
                self.stack.push(id);
            }
            op::LIST => {
                let items = self.pop_mark()?;
                self.push(Node::List(items));
            }
            op::TUPLE => {
                let items = self.pop_mark()?;
                self.push(Node::Tuple(items));
            }
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let n = (code - op::TUPLE1 + 1) as usize;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.pop()?);
                }
                items.reverse();
                self.push(Node::Tuple(items));
            }
            op::SETITEM => {
                let v = self.pop()?;
                let k = self.pop()?;
                let d = self.top()?;
                self.set_items(d, vec![k, v])?;
            }
            op::SETITEMS => {
                let items = self.pop_mark()?;
                let d = self.top()?;
                self.set_items(d, items)?;
            }
            op::APPEND => {
                let v = self.pop()?;
                let l = self.top()?;
                self.append(l, vec![v])?;
            }
            op::APPENDS => {
                let items = self.pop_mark()?;
                let l = self.top()?;
                self.append(l, items)?;
            }
            op::NONE => self.push(Node::None),
            op::NEWTRUE => self.push(Node::Bool(true)),
            op::NEWFALSE => self.push(Node::Bool(false)),
            op::BININT => {
                let v = i32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
                self.push(Node::Int(v.into()));
            }
            op::BININT1 => {
                let v = self.u8()?;
                self.push(Node::Int(v.into()));
            }
            op::BININT2 => {
                let v = self.u16()?;
                self.push(Node::Int(v.into()));
            }
            op::LONG1 => {
                let n = self.u8()? as usize;
                let raw = self.take(n)?;
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
                self.push(Node::Int(i128::from_le_bytes(bytes)));
            }
            op::BINFLOAT => {
                let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes"));
                self.push(Node::Float(v));
            }
            op::SHORT_BINUNICODE => {
                let n = self.u8()? as usize;
                self.string(n)?;
            }
            op::BINUNICODE => {
                let n = self.u32()? as usize;
                self.string(n)?;
            }
            op::BINUNICODE8 => {
                let n = self.u64()?;
                let n = usize::try_from(n).map_err(|_| format!("string of {n} bytes"))?;
                self.string(n)?;
            }
            op::MEMOIZE => {
                let idx = u32::try_from(self.memo.len()).map_err(|_| "memo overflow")?;
                self.memo_put(idx)?;
            }
            op::BINPUT => {
                let idx = self.u8()?;
                self.memo_put(idx.into())?;
            }
            op::LONG_BINPUT => {
                let idx = self.u32()?;
                self.memo_put(idx)?;
            }
            op::BINGET => {
                let idx = self.u8()?;
                self.memo_get(idx.into())?;
            }
            op::LONG_BINGET => {
                let idx = self.u32()?;
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

/// Reads a pickle into a value tree; returns the tree and its root.
pub fn read_pickle(data: &[u8]) -> Result<(Tree<'_>, NodeId), PickleError> {
    run(data, |_| {})
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

fn run(data: &[u8], mut on_opcode: impl FnMut(u8)) -> Result<(Tree<'_>, NodeId), PickleError> {
    if data.first() != Some(&op::PROTO) {
        return Err(PickleError {
            offset: 0,
            message: "does not start with the PROTO opcode (0x80): not a pickle of protocol 2 \
                      or later"
                .into(),
        });
    }
    let mut m = Machine {
        data,
        pos: 0,
        tree: Tree::default(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: FxHashMap::default(),
    };
    loop {
        let at = m.pos;
        if at == data.len() {
            return Err(PickleError {
                offset: at,
                message: "truncated: ended before the STOP opcode".into(),
            });
        }
        on_opcode(data[at]);
        match m.step() {
            Ok(Some(root)) => return Ok((m.tree, root)),
            Ok(None) => {}
            Err(message) => {
                return Err(PickleError {
                    offset: at,
                    message,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_small_dict_with_memo_references() {
        // pickle.dumps({"a": [1, "a", 2**40, -1, None, True]}, protocol=4)
        let data = b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94]\x94(K\x01h\x01\x8a\x06\x00\x00\x00\x00\x00\x01J\xff\xff\xff\xffN\x88es.";
        let (tree, root) = read_pickle(data).unwrap();
        let Node::Dict(items) = tree.get(root) else {
            panic!()
        };
        assert_eq!(items.len(), 1);
        let Node::List(l) = tree.get(items[0].1) else {
            panic!()
        };
        let vals: Vec<&Node> = l.iter().map(|&i| tree.get(i)).collect();
        assert_eq!(
            vals,
            [
                &Node::Int(1),
                &Node::Str("a".into()),
                &Node::Int(1 << 40),
                &Node::Int(-1),
                &Node::None,
                &Node::Bool(true)
            ]
        );
    }

    #[test]
    fn errors_name_the_offset_and_the_problem() {
        let e = read_pickle(b"\x80\x04X\xff\xff\xff\x7fab").unwrap_err();
        assert_eq!(e.offset, 2);
        assert!(e.message.contains("truncated"), "{e}");
        let e = read_pickle(b"\x80\x04cos\nsystem\n").unwrap_err();
        assert!(e.message.contains("GLOBAL"), "{e}");
        let e = read_pickle(b"\x80\x01N.").unwrap_err();
        assert!(e.message.contains("protocol 1"), "{e}");
        let e = read_pickle(b"{\"a\": 1}").unwrap_err();
        assert_eq!(e.offset, 0);
        let e = read_pickle(b"\x80\x04e.").unwrap_err();
        assert!(e.message.contains("MARK"), "{e}");
    }
}
