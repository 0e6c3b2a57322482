//! Writing a [`Snapshot`] as the pickle `torch.cuda.memory._dump_snapshot()` writes.
//!
//! The output is pickle protocol 4 (framed, strings memoized) and uses only the opcodes that
//! MemoryViz.js's own unpickler understands (spec §12.3; [`OPCODES_USED`]), so both
//! `torch.cuda._memory_viz` (Python's `pickle`) and the memory_viz page read it. Keys, key
//! order, value types and the list/dict batching follow what Python's pickler produces for
//! torch's snapshot dict; containers are not memoized (nothing refers to them twice).

use std::io::{self, Write};

use cachalot_core::TraceAction;
use rustc_hash::FxHashMap;

use crate::model::{AllocatorSettings, Segment, Snapshot, TraceEvent};

/// Opcodes this writer emits; all of them are in MemoryViz.js's set.
pub const OPCODES_USED: &[(&str, u8)] = &[
    ("PROTO", op::PROTO),
    ("FRAME", op::FRAME),
    ("STOP", op::STOP),
    ("MARK", op::MARK),
    ("EMPTY_DICT", op::EMPTY_DICT),
    ("SETITEM", op::SETITEM),
    ("SETITEMS", op::SETITEMS),
    ("EMPTY_LIST", op::EMPTY_LIST),
    ("APPEND", op::APPEND),
    ("APPENDS", op::APPENDS),
    ("EMPTY_TUPLE", op::EMPTY_TUPLE),
    ("TUPLE2", op::TUPLE2),
    ("NEWTRUE", op::NEWTRUE),
    ("NEWFALSE", op::NEWFALSE),
    ("BININT", op::BININT),
    ("BININT1", op::BININT1),
    ("BININT2", op::BININT2),
    ("LONG1", op::LONG1),
    ("BINFLOAT", op::BINFLOAT),
    ("SHORT_BINUNICODE", op::SHORT_BINUNICODE),
    ("BINUNICODE", op::BINUNICODE),
    ("MEMOIZE", op::MEMOIZE),
    ("BINGET", op::BINGET),
    ("LONG_BINGET", op::LONG_BINGET),
];

/// Pickle opcodes (Python's `pickle.py` names).
pub(crate) mod op {
    pub const PROTO: u8 = 0x80;
    pub const FRAME: u8 = 0x95;
    pub const STOP: u8 = b'.';
    pub const MARK: u8 = b'(';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const EMPTY_DICT: u8 = b'}';
    pub const DICT: u8 = b'd';
    pub const SETITEM: u8 = b's';
    pub const SETITEMS: u8 = b'u';
    pub const EMPTY_LIST: u8 = b']';
    pub const LIST: u8 = b'l';
    pub const APPEND: u8 = b'a';
    pub const APPENDS: u8 = b'e';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const TUPLE: u8 = b't';
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NONE: u8 = b'N';
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const LONG1: u8 = 0x8a;
    pub const BINFLOAT: u8 = b'G';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE: u8 = b'X';
    pub const BINUNICODE8: u8 = 0x8d;
    pub const MEMOIZE: u8 = 0x94;
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
}

/// Python's `pickle` batches APPENDS and SETITEMS by this many items.
const BATCH: usize = 1000;
/// Python's frame size target for protocol 4.
const FRAME_TARGET: usize = 64 * 1024;

/// A protocol-4 pickle being written: the current frame, and the memo of strings.
struct Pickler<W: Write> {
    out: W,
    frame: Vec<u8>,
    memo: FxHashMap<String, u32>,
}

impl<W: Write> Pickler<W> {
    fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&[op::PROTO, 4])?;
        Ok(Pickler {
            out,
            frame: Vec::with_capacity(FRAME_TARGET + 1024),
            memo: FxHashMap::default(),
        })
    }

    /// Ends the current frame if it is big enough (only between two objects).
    fn maybe_commit(&mut self) -> io::Result<()> {
        if self.frame.len() >= FRAME_TARGET {
            self.commit()?;
        }
        Ok(())
    }

    fn commit(&mut self) -> io::Result<()> {
        if self.frame.is_empty() {
            return Ok(());
        }
        if self.frame.len() >= 4 {
            self.out.write_all(&[op::FRAME])?;
            self.out
                .write_all(&(self.frame.len() as u64).to_le_bytes())?;
        }
        self.out.write_all(&self.frame)?;
        self.frame.clear();
        Ok(())
    }

    fn op(&mut self, code: u8) {
        self.frame.push(code);
    }

    fn bool(&mut self, b: bool) {
        self.op(if b { op::NEWTRUE } else { op::NEWFALSE });
    }

    /// An integer, in the smallest form Python's pickler picks.
    fn int(&mut self, v: i128) {
        if (0..=0xff).contains(&v) {
            self.frame.extend_from_slice(&[op::BININT1, v as u8]);
        } else if (0..=0xffff).contains(&v) {
            self.op(op::BININT2);
            self.frame.extend_from_slice(&(v as u16).to_le_bytes());
        } else if (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
            self.op(op::BININT);
            self.frame.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            // Python's encode_long: little-endian two's complement, minimal length.
            let bytes = v.to_le_bytes();
            let mut n = 16;
            while n > 1 {
                let last = bytes[n - 1];
                let sign_of_prev = bytes[n - 2] & 0x80;
                if (last == 0 && sign_of_prev == 0) || (last == 0xff && sign_of_prev != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.frame.extend_from_slice(&[op::LONG1, n as u8]);
            self.frame.extend_from_slice(&bytes[..n]);
        }
    }

    fn float(&mut self, f: f64) {
        self.op(op::BINFLOAT);
        self.frame.extend_from_slice(&f.to_be_bytes());
    }

    /// A string; the first occurrence is memoized, later ones refer to it.
    fn str(&mut self, s: &str) {
        if let Some(&idx) = self.memo.get(s) {
            if idx < 256 {
                self.frame.extend_from_slice(&[op::BINGET, idx as u8]);
            } else {
                self.op(op::LONG_BINGET);
                self.frame.extend_from_slice(&idx.to_le_bytes());
            }
            return;
        }
        if s.len() < 256 {
            self.frame
                .extend_from_slice(&[op::SHORT_BINUNICODE, s.len() as u8]);
        } else {
            self.op(op::BINUNICODE);
            self.frame
                .extend_from_slice(&(s.len() as u32).to_le_bytes());
        }
        self.frame.extend_from_slice(s.as_bytes());
        self.op(op::MEMOIZE);
        let idx = self.memo.len() as u32;
        self.memo.insert(s.to_string(), idx);
    }

    /// `(a, b)`.
    fn pair(&mut self, a: i128, b: i128) {
        self.int(a);
        self.int(b);
        self.op(op::TUPLE2);
    }

    /// A list of `items`, each written by `item`, batched as Python batches them.
    fn list<T>(
        &mut self,
        items: &[T],
        mut item: impl FnMut(&mut Self, &T) -> io::Result<()>,
    ) -> io::Result<()> {
        self.op(op::EMPTY_LIST);
        for chunk in items.chunks(BATCH) {
            if chunk.len() > 1 {
                self.op(op::MARK);
            }
            for x in chunk {
                item(self, x)?;
                self.maybe_commit()?;
            }
            self.op(if chunk.len() > 1 {
                op::APPENDS
            } else {
                op::APPEND
            });
        }
        Ok(())
    }

    /// Starts a dict whose items follow (at most [`BATCH`] of them); end it with
    /// [`Self::end_dict`].
    fn begin_dict(&mut self) {
        self.op(op::EMPTY_DICT);
        self.op(op::MARK);
    }

    fn end_dict(&mut self) {
        self.op(op::SETITEMS);
    }
}

fn write_segment<W: Write>(p: &mut Pickler<W>, s: &Segment) -> io::Result<()> {
    p.begin_dict();
    p.str("device");
    p.int(s.device.into());
    p.str("address");
    p.int(s.address.into());
    p.str("total_size");
    p.int(s.total_size.into());
    p.str("allocated_size");
    p.int(s.allocated_size.into());
    p.str("active_size");
    p.int(s.active_size.into());
    p.str("requested_size");
    p.int(s.requested_size.into());
    p.str("stream");
    p.int(s.stream.into());
    p.str("segment_type");
    p.str(if s.is_small { "small" } else { "large" });
    p.str("segment_pool_id");
    p.pair(s.pool.first.into(), s.pool.second.into());
    p.str("is_expandable");
    p.bool(s.is_expandable);
    p.str("frames");
    p.op(op::EMPTY_LIST);
    p.str("blocks");
    p.list(&s.blocks, |p, b| {
        p.begin_dict();
        p.str("address");
        p.int(b.address.into());
        p.str("size");
        p.int(b.size.into());
        p.str("requested_size");
        p.int(b.requested_size.into());
        p.str("state");
        p.str(b.state.name());
        p.str("frames");
        p.op(op::EMPTY_LIST);
        p.end_dict();
        Ok(())
    })?;
    p.end_dict();
    Ok(())
}

fn write_entry<W: Write>(p: &mut Pickler<W>, e: &TraceEvent) {
    p.begin_dict();
    p.str("action");
    p.str(e.action.name());
    p.str(if e.action == TraceAction::Oom {
        "device_free"
    } else {
        "addr"
    });
    p.int(e.addr.into());
    p.str("size");
    p.int(e.size.into());
    p.str("stream");
    p.int(e.stream.into());
    if let Some(t) = e.time_us {
        p.str("time_us");
        p.int(t.into());
    }
    p.str("compile_context");
    p.str("N/A");
    p.str("user_metadata");
    p.str("");
    if let Some(pool) = e.pool {
        p.str("pool_id");
        p.pair(pool.first.into(), pool.second.into());
    }
    p.end_dict();
}

fn write_settings<W: Write>(p: &mut Pickler<W>, s: &AllocatorSettings) {
    p.begin_dict();
    p.str("PYTORCH_CUDA_ALLOC_CONF");
    p.str(&s.alloc_conf);
    p.str("max_split_size");
    p.int(s.max_split_size.into());
    p.str("garbage_collection_threshold");
    p.float(s.garbage_collection_threshold);
    p.str("expandable_segments");
    p.bool(s.expandable_segments);
    p.str("pinned_num_register_threads");
    p.int(s.pinned_num_register_threads.into());
    p.str("release_lock_on_cudamalloc");
    p.bool(s.release_lock_on_cudamalloc);
    p.str("pinned_use_cuda_host_register");
    p.bool(s.pinned_use_cuda_host_register);
    p.str("graph_capture_record_stream_reuse");
    p.bool(s.graph_capture_record_stream_reuse);
    p.str("max_round_threshold");
    p.int(s.max_round_threshold.into());
    p.str("max_cached_size");
    p.int(s.max_cached_size.into());
    p.str("roundup_power2_divisions");
    p.begin_dict();
    for (name, d) in AllocatorSettings::INTERVALS
        .iter()
        .zip(s.roundup_power2_divisions)
    {
        p.str(name);
        p.int(d.into());
    }
    p.end_dict();
    p.end_dict();
}

/// Writes `snap` as torch 2.15's `_dump_snapshot` pickle (protocol 4): the keys `segments`,
/// `device_traces`, `allocator_settings` (when known), `external_annotations`,
/// `host_segments` and `host_traces` (the last three empty), in torch's order.
pub fn write_pickle(snap: &Snapshot, out: impl Write) -> io::Result<()> {
    let mut p = Pickler::new(out)?;
    p.begin_dict();
    p.str("segments");
    p.list(&snap.segments, write_segment)?;
    p.str("device_traces");
    p.list(&snap.device_traces, |p, t| {
        p.list(&t.entries, |p, e| {
            write_entry(p, e);
            Ok(())
        })
    })?;
    if let Some(s) = &snap.allocator_settings {
        p.str("allocator_settings");
        write_settings(&mut p, s);
    }
    for key in ["external_annotations", "host_segments", "host_traces"] {
        p.str(key);
        p.op(op::EMPTY_LIST);
    }
    p.end_dict();
    p.op(op::STOP);
    p.commit()?;
    p.out.flush()
}

/// [`write_pickle`] into a byte vector.
pub fn to_pickle_bytes(snap: &Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    write_pickle(snap, &mut out).expect("writing to a Vec cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int_bytes(v: i128) -> Vec<u8> {
        let mut p = Pickler::new(Vec::new()).unwrap();
        p.int(v);
        p.frame
    }

    #[test]
    fn integers_take_pythons_smallest_form() {
        assert_eq!(int_bytes(0), [op::BININT1, 0]);
        assert_eq!(int_bytes(256), [op::BININT2, 0, 1]);
        assert_eq!(int_bytes(-1), [op::BININT, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(int_bytes(1 << 31), [op::LONG1, 5, 0, 0, 0, 0x80, 0]);
        // 2^44, the simulated device's first address: six bytes, as in torch's pickles.
        assert_eq!(int_bytes(1 << 44), [op::LONG1, 6, 0, 0, 0, 0, 0, 0x10]);
        assert_eq!(int_bytes(-(1 << 40)), [op::LONG1, 6, 0, 0, 0, 0, 0, 0xff]);
        assert_eq!(int_bytes(-(1 << 39)), [op::LONG1, 5, 0, 0, 0, 0, 0x80]);
    }
}
