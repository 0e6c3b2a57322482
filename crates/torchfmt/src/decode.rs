//! From a value tree (pickle or JSON) to a [`Snapshot`], checking the schema torch writes.
//!
//! Required, as MemoryViz.js requires them: `segments[*].{device, address, total_size,
//! stream, blocks[*].{size, state}}` and `device_traces[d][*].{action, addr, size, stream}`
//! (`oom` entries have `device_free` instead of `addr`). Optional, with torch's meaning when
//! absent: block `address` (segment address plus the sizes before it), `requested_size`
//! (the block size), the segment's `allocated_size` / `active_size` / `requested_size`
//! (summed from its blocks), `segment_type` ("large"), `is_expandable` (false), `time_us`,
//! `device_traces` and `allocator_settings`. A bare list is read as the segments alone, as
//! `_memory_viz.py` does. Other keys (`frames`, `history`, `compile_context`, …) are ignored.
//!
//! Each container of the schema is visited once: a pickle whose memo makes one list appear
//! in several places of the schema (or inside itself) is refused rather than expanded.

use std::collections::HashMap;

use crate::SnapshotError;
use crate::model::{
    AllocatorSettings, Block, DeviceTrace, Segment, Snapshot, TraceEvent, parse_action, parse_state,
};
use crate::tree::{Node, NodeId, Tree};

/// Walks a [`Tree`] with a path for error messages.
struct Decoder<'t, 'a> {
    tree: &'t Tree<'a>,
    visited: Vec<bool>,
    path: Vec<String>,
}

type R<T> = Result<T, SnapshotError>;

impl<'t, 'a> Decoder<'t, 'a> {
    fn err(&self, message: impl Into<String>) -> SnapshotError {
        SnapshotError::Schema {
            path: if self.path.is_empty() {
                "<root>".into()
            } else {
                self.path.concat()
            },
            message: message.into(),
        }
    }

    fn describe(&self, id: NodeId) -> String {
        match self.tree.get(id) {
            Node::Str(s) => {
                let s: String = s.chars().take(40).collect();
                format!("str {s:?}")
            }
            Node::Int(i) => format!("int {i}"),
            Node::Float(f) => format!("float {f}"),
            Node::Bool(b) => format!("bool {b}"),
            other => other.type_name().to_string(),
        }
    }

    /// Marks a container as visited; a second visit is refused.
    fn visit(&mut self, id: NodeId) -> R<()> {
        let seen = &mut self.visited[id.0 as usize];
        if *seen {
            return Err(self.err(
                "the same container appears twice in the snapshot (shared or recursive \
                 structure); torch never writes that",
            ));
        }
        *seen = true;
        Ok(())
    }

    fn list(&mut self, id: NodeId) -> R<&'t [NodeId]> {
        match self.tree.get(id) {
            Node::List(v) | Node::Tuple(v) => {
                self.visit(id)?;
                Ok(v)
            }
            _ => Err(self.err(format!("expected a list, found {}", self.describe(id)))),
        }
    }

    fn dict(&mut self, id: NodeId) -> R<&'t [(NodeId, NodeId)]> {
        match self.tree.get(id) {
            Node::Dict(v) => {
                self.visit(id)?;
                Ok(v)
            }
            _ => Err(self.err(format!("expected a dict, found {}", self.describe(id)))),
        }
    }

    /// The value of `key` in `dict` (the last one if repeated).
    fn field(&self, dict: &[(NodeId, NodeId)], key: &str) -> Option<NodeId> {
        dict.iter()
            .rev()
            .find(|(k, _)| matches!(self.tree.get(*k), Node::Str(s) if s == key))
            .map(|&(_, v)| v)
    }

    fn required(&mut self, dict: &[(NodeId, NodeId)], key: &str) -> R<NodeId> {
        self.field(dict, key)
            .ok_or_else(|| self.err(format!("missing key '{key}'")))
    }

    fn with<T>(&mut self, seg: String, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        self.path.push(seg);
        let r = f(self);
        self.path.pop();
        r
    }

    fn int(&mut self, key: &str, id: NodeId) -> R<i128> {
        match self.tree.get(id) {
            Node::Int(i) => Ok(*i),
            // JSON written by some tools turns big integers into floats.
            Node::Float(f) if f.fract() == 0.0 && f.abs() < 2f64.powi(63) => Ok(*f as i128),
            _ => Err(self.with(format!(".{key}"), |d| {
                Ok(d.err(format!("expected an integer, found {}", d.describe(id))))
            })?),
        }
    }

    fn u64(&mut self, key: &str, id: NodeId) -> R<u64> {
        let v = self.int(key, id)?;
        u64::try_from(v).map_err(|_| {
            self.path.push(format!(".{key}"));
            let e = self.err(format!("{v} is out of range (expected 0 to 2^64-1)"));
            self.path.pop();
            e
        })
    }

    fn u64_field(&mut self, dict: &[(NodeId, NodeId)], key: &str) -> R<u64> {
        let id = self.required(dict, key)?;
        self.u64(key, id)
    }

    fn opt_u64(&mut self, dict: &[(NodeId, NodeId)], key: &str) -> R<Option<u64>> {
        match self.field(dict, key) {
            Some(id) if *self.tree.get(id) != Node::None => self.u64(key, id).map(Some),
            _ => Ok(None),
        }
    }

    fn str(&mut self, key: &str, id: NodeId) -> R<&'t str> {
        match self.tree.get(id) {
            Node::Str(s) => Ok(s),
            _ => Err(self.with(format!(".{key}"), |d| {
                Ok(d.err(format!("expected a string, found {}", d.describe(id))))
            })?),
        }
    }

    fn bool(&mut self, key: &str, id: NodeId) -> R<bool> {
        match self.tree.get(id) {
            Node::Bool(b) => Ok(*b),
            Node::Int(i @ (0 | 1)) => Ok(*i == 1),
            _ => Err(self.with(format!(".{key}"), |d| {
                Ok(d.err(format!("expected a bool, found {}", d.describe(id))))
            })?),
        }
    }

    fn block(&mut self, id: NodeId, next_address: u64) -> R<Block> {
        let d = self.dict(id)?;
        let size = self.u64_field(d, "size")?;
        let state_id = self.required(d, "state")?;
        let state_name = self.str("state", state_id)?;
        let state = parse_state(state_name).ok_or_else(|| {
            self.err(format!(
                "unknown block state '{state_name}' (expected active_allocated, \
                 active_pending_free or inactive)"
            ))
        })?;
        Ok(Block {
            address: self.opt_u64(d, "address")?.unwrap_or(next_address),
            size,
            requested_size: self.opt_u64(d, "requested_size")?.unwrap_or(size),
            state,
        })
    }

    fn segment(&mut self, id: NodeId) -> R<Segment> {
        let d = self.dict(id)?;
        let device = self.u64_field(d, "device")?;
        let device = u32::try_from(device)
            .ok()
            .filter(|&x| x < MAX_DEVICES)
            .ok_or_else(|| self.err(format!("device {device} is not a device ordinal")))?;
        let address = self.u64_field(d, "address")?;
        let total_size = self.u64_field(d, "total_size")?;
        let stream = self.u64_field(d, "stream")?;
        let is_small = match self.field(d, "segment_type") {
            Some(t) => match self.str("segment_type", t)? {
                "small" => true,
                "large" => false,
                other => {
                    return Err(self.err(format!(
                        "unknown segment_type '{other}' (expected small or large)"
                    )));
                }
            },
            None => false,
        };
        let is_expandable = match self.field(d, "is_expandable") {
            Some(b) => self.bool("is_expandable", b)?,
            None => false,
        };
        let blocks_id = self.required(d, "blocks")?;
        let blocks = self.with(".blocks".into(), |dec| {
            let ids = dec.list(blocks_id)?;
            let mut blocks = Vec::with_capacity(ids.len());
            let mut next = address;
            for (i, &b) in ids.iter().enumerate() {
                let block = dec.with(format!("[{i}]"), |dec| dec.block(b, next))?;
                next = block.address.wrapping_add(block.size);
                blocks.push(block);
            }
            Ok(blocks)
        })?;
        let sum =
            |f: fn(&Block) -> u64| -> u64 { blocks.iter().map(f).fold(0u64, u64::saturating_add) };
        let allocated = self.opt_u64(d, "allocated_size")?;
        let active = self.opt_u64(d, "active_size")?;
        let requested = self.opt_u64(d, "requested_size")?;
        use cachalot_core::BlockState::*;
        Ok(Segment {
            device,
            address,
            total_size,
            allocated_size: allocated.unwrap_or_else(|| {
                sum(|b| {
                    if b.state == ActiveAllocated {
                        b.size
                    } else {
                        0
                    }
                })
            }),
            active_size: active
                .unwrap_or_else(|| sum(|b| if b.state != Inactive { b.size } else { 0 })),
            requested_size: requested.unwrap_or_else(|| {
                sum(|b| {
                    if b.state != Inactive {
                        b.requested_size
                    } else {
                        0
                    }
                })
            }),
            stream,
            is_small,
            is_expandable,
            blocks,
        })
    }

    /// Reads one history entry into `trace`. `skipped_at` indexes `trace.skipped` by action
    /// name, so many distinct unknown actions cost one lookup each, not a scan.
    fn entry(
        &mut self,
        id: NodeId,
        trace: &mut DeviceTrace,
        skipped_at: &mut HashMap<String, usize>,
    ) -> R<()> {
        let d = self.dict(id)?;
        let action_id = self.required(d, "action")?;
        let name = self.str("action", action_id)?;
        let Some(action) = parse_action(name) else {
            match skipped_at.get(name) {
                Some(&i) => trace.skipped[i].1 += 1,
                None => {
                    skipped_at.insert(name.to_string(), trace.skipped.len());
                    trace.skipped.push((name.to_string(), 1));
                }
            }
            return Ok(());
        };
        use cachalot_core::TraceAction::*;
        let addr = match action {
            Oom => match self.opt_u64(d, "device_free")? {
                Some(v) => v,
                None => self.opt_u64(d, "addr")?.unwrap_or(0),
            },
            Snapshot => self.opt_u64(d, "addr")?.unwrap_or(0),
            _ => self.u64_field(d, "addr")?,
        };
        let time_us = match self.field(d, "time_us") {
            Some(t) if *self.tree.get(t) != Node::None => {
                let v = self.int("time_us", t)?;
                Some(i64::try_from(v).map_err(|_| self.err("time_us out of range"))?)
            }
            _ => None,
        };
        trace.entries.push(TraceEvent {
            action,
            addr,
            size: self.u64_field(d, "size")?,
            stream: self.u64_field(d, "stream")?,
            time_us,
        });
        Ok(())
    }

    fn settings(&mut self, id: NodeId) -> R<Option<AllocatorSettings>> {
        if *self.tree.get(id) == Node::None {
            return Ok(None);
        }
        let d = self.dict(id)?;
        let mut s = AllocatorSettings::default();
        for &(k, v) in d {
            let Node::Str(key) = self.tree.get(k) else {
                continue;
            };
            let key: &str = key;
            let int = |dec: &mut Self| -> R<i64> {
                let i = dec.int(key, v)?;
                i64::try_from(i).map_err(|_| dec.err(format!("{key} out of range")))
            };
            match key {
                "PYTORCH_CUDA_ALLOC_CONF" | "PYTORCH_ALLOC_CONF" => {
                    s.alloc_conf = self.str(key, v)?.to_string()
                }
                "max_split_size" => s.max_split_size = int(self)?,
                "garbage_collection_threshold" => {
                    s.garbage_collection_threshold = match self.tree.get(v) {
                        Node::Float(f) => *f,
                        _ => int(self)? as f64,
                    }
                }
                "expandable_segments" => s.expandable_segments = self.bool(key, v)?,
                "release_lock_on_cudamalloc" => s.release_lock_on_cudamalloc = self.bool(key, v)?,
                "roundup_power2_divisions" => {
                    if let Node::Dict(items) = self.tree.get(v) {
                        for &(ik, iv) in items {
                            if let (Node::Str(name), Node::Int(div)) =
                                (self.tree.get(ik), self.tree.get(iv))
                            {
                                let slot =
                                    AllocatorSettings::INTERVALS.iter().position(|x| x == name);
                                if let (Some(slot), Ok(div)) = (slot, u64::try_from(*div)) {
                                    s.roundup_power2_divisions[slot] = div;
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(Some(s))
    }

    fn snapshot(&mut self, root: NodeId) -> R<Snapshot> {
        let (segments_id, traces_id, settings_id) = match self.tree.get(root) {
            Node::List(_) => (root, None, None),
            Node::Dict(_) => {
                let d = self.dict(root)?;
                let segs = self.field(d, "segments").ok_or_else(|| {
                    self.err(
                        "missing key 'segments': not a torch memory snapshot (expected the \
                         dict torch.cuda.memory._snapshot() returns)",
                    )
                })?;
                (
                    segs,
                    self.field(d, "device_traces"),
                    self.field(d, "allocator_settings"),
                )
            }
            _ => {
                return Err(self.err(format!(
                    "expected a dict (torch.cuda.memory._snapshot()) or a list of segments, \
                     found {}",
                    self.describe(root)
                )));
            }
        };
        let segments = self.with("segments".into(), |dec| {
            let ids = dec.list(segments_id)?;
            let mut v = Vec::with_capacity(ids.len());
            for (i, &s) in ids.iter().enumerate() {
                v.push(dec.with(format!("[{i}]"), |dec| dec.segment(s))?);
            }
            Ok(v)
        })?;
        let device_traces = match traces_id {
            None => Vec::new(),
            Some(t) => self.with("device_traces".into(), |dec| {
                let devices = dec.list(t)?;
                if devices.len() > MAX_DEVICES as usize {
                    return Err(dec.err(format!(
                        "{} devices (at most {MAX_DEVICES} are read)",
                        devices.len()
                    )));
                }
                let mut out = Vec::with_capacity(devices.len());
                for (i, &dev) in devices.iter().enumerate() {
                    out.push(dec.with(format!("[{i}]"), |dec| {
                        let ids = dec.list(dev)?;
                        let mut trace = DeviceTrace {
                            entries: Vec::with_capacity(ids.len()),
                            skipped: Vec::new(),
                        };
                        let mut skipped_at = HashMap::new();
                        for (j, &e) in ids.iter().enumerate() {
                            dec.with(format!("[{j}]"), |dec| {
                                dec.entry(e, &mut trace, &mut skipped_at)
                            })?;
                        }
                        Ok(trace)
                    })?);
                }
                Ok(out)
            })?,
        };
        let allocator_settings = match settings_id {
            None => None,
            Some(s) => self.with("allocator_settings".into(), |dec| dec.settings(s))?,
        };
        Ok(Snapshot {
            segments,
            device_traces,
            allocator_settings,
        })
    }
}

/// Device ordinals above this are refused (no machine has that many GPUs).
pub const MAX_DEVICES: u32 = 1 << 16;

/// Decodes the tree of a pickle or JSON document as a torch memory snapshot.
pub fn decode(tree: &Tree<'_>, root: NodeId) -> Result<Snapshot, SnapshotError> {
    Decoder {
        tree,
        visited: vec![false; tree.len()],
        path: Vec::new(),
    }
    .snapshot(root)
}
