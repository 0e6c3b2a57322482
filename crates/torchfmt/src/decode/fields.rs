//! Reading the typed fields of the schema's dicts (integers, sizes, strings, bools, with
//! errors that name the field and its place), and turning a dict into its model type: a
//! block, a segment, a history entry, the allocator settings.

use cachalot_core::{BlockState, TraceAction};

use std::collections::HashMap;

use super::{Builder, DictNode, ListData, MAX_DEVICES, Node, R, RawBlock, field_err, schema};
use crate::model::{
    AllocatorSettings, Block, DeviceTrace, Segment, TraceEvent, parse_action, parse_state,
};
use crate::schema::{Role, Val, k};

impl Builder {
    pub(super) fn int_field(&self, role: Role, key: &str, v: Val) -> R<i128> {
        match v {
            Val::Float(f) if f.fract() == 0.0 && f.abs() < 2f64.powi(63) => Ok(f as i128),
            _ => self.as_int(v).ok_or_else(|| {
                field_err(
                    role,
                    key,
                    format!("expected an integer, found {}", self.describe(v)),
                )
            }),
        }
    }

    pub(super) fn u64_val(&self, role: Role, key: &str, v: Val) -> R<u64> {
        let i = self.int_field(role, key, v)?;
        u64::try_from(i).map_err(|_| {
            field_err(
                role,
                key,
                format!("{i} is out of range (expected 0 to 2^64-1)"),
            )
        })
    }

    pub(super) fn required(&self, role: Role, d: &DictNode, code: u8, key: &str) -> R<Val> {
        match d.get(code) {
            Val::Missing => Err(schema(role, format!("missing key '{key}'"))),
            v => Ok(v),
        }
    }

    pub(super) fn u64_field(&self, role: Role, d: &DictNode, code: u8, key: &str) -> R<u64> {
        let v = self.required(role, d, code, key)?;
        self.u64_val(role, key, v)
    }

    pub(super) fn opt_u64(&self, role: Role, d: &DictNode, code: u8, key: &str) -> R<Option<u64>> {
        match d.get(code) {
            Val::Missing | Val::None => Ok(None),
            v => self.u64_val(role, key, v).map(Some),
        }
    }

    pub(super) fn str_val(&self, role: Role, key: &str, v: Val) -> R<&str> {
        self.str_of(v).ok_or_else(|| {
            field_err(
                role,
                key,
                format!("expected a string, found {}", self.describe(v)),
            )
        })
    }

    pub(super) fn bool_val(&self, role: Role, key: &str, v: Val) -> R<bool> {
        match (v, self.as_int(v)) {
            (Val::Bool(b), _) => Ok(b),
            (_, Some(i @ (0 | 1))) => Ok(i == 1),
            _ => Err(field_err(
                role,
                key,
                format!("expected a bool, found {}", self.describe(v)),
            )),
        }
    }

    pub(super) fn block(&self, role: Role, d: &DictNode) -> R<RawBlock> {
        let size = self.u64_field(role, d, k::SIZE, "size")?;
        let state_v = self.required(role, d, k::STATE, "state")?;
        let name = self.str_val(role, "state", state_v)?;
        let state = parse_state(name).ok_or_else(|| {
            schema(
                role,
                format!(
                    "unknown block state '{name}' (expected active_allocated, \
                     active_pending_free or inactive)"
                ),
            )
        })?;
        Ok(RawBlock {
            address: self.opt_u64(role, d, k::ADDRESS, "address")?,
            size,
            requested_size: self.opt_u64(role, d, k::REQUESTED_SIZE, "requested_size")?,
            state,
        })
    }

    pub(super) fn segment(&mut self, role: Role, d: &DictNode) -> R<Segment> {
        let device = self.u64_field(role, d, k::DEVICE, "device")?;
        let device = u32::try_from(device)
            .ok()
            .filter(|&x| x < MAX_DEVICES)
            .ok_or_else(|| schema(role, format!("device {device} is not a device ordinal")))?;
        let address = self.u64_field(role, d, k::ADDRESS, "address")?;
        let total_size = self.u64_field(role, d, k::TOTAL_SIZE, "total_size")?;
        let stream = self.u64_field(role, d, k::STREAM, "stream")?;
        let is_small = match d.get(k::SEGMENT_TYPE) {
            Val::Missing => false,
            t => match self.str_val(role, "segment_type", t)? {
                "small" => true,
                "large" => false,
                other => {
                    return Err(schema(
                        role,
                        format!("unknown segment_type '{other}' (expected small or large)"),
                    ));
                }
            },
        };
        let is_expandable = match d.get(k::IS_EXPANDABLE) {
            Val::Missing => false,
            b => self.bool_val(role, "is_expandable", b)?,
        };
        let pool = self
            .pool_field(role, d, k::SEGMENT_POOL_ID, "segment_pool_id")?
            .unwrap_or_default();
        let blocks_v = self.required(role, d, k::BLOCKS, "blocks")?;
        let Role::Segment(i) = role else {
            unreachable!("a segment's role")
        };
        let l = self.take_list(Role::Blocks(i), blocks_v)?;
        if let Some(e) = l.error {
            return Err(e);
        }
        let ListData::Blocks(raw) = l.data else {
            unreachable!("a blocks list holds blocks")
        };
        let mut blocks = Vec::with_capacity(raw.len());
        let mut next = address;
        for b in raw {
            let block = Block {
                address: b.address.unwrap_or(next),
                size: b.size,
                requested_size: b.requested_size.unwrap_or(b.size),
                state: b.state,
            };
            next = block.address.wrapping_add(block.size);
            blocks.push(block);
        }
        let sum =
            |f: fn(&Block) -> u64| -> u64 { blocks.iter().map(f).fold(0u64, u64::saturating_add) };
        let allocated = self.opt_u64(role, d, k::ALLOCATED_SIZE, "allocated_size")?;
        let active = self.opt_u64(role, d, k::ACTIVE_SIZE, "active_size")?;
        let requested = self.opt_u64(role, d, k::REQUESTED_SIZE, "requested_size")?;
        use BlockState::*;
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
            pool,
            blocks,
        })
    }

    /// Reads one history entry into `trace`. `skipped_at` indexes `trace.skipped` by action
    /// name, so many distinct unknown actions cost one lookup each, not a scan.
    pub(super) fn entry(
        &mut self,
        role: Role,
        d: &DictNode,
        trace: &mut DeviceTrace,
        skipped_at: &mut HashMap<String, usize>,
    ) -> R<()> {
        let action_v = self.required(role, d, k::ACTION, "action")?;
        let name = self.str_val(role, "action", action_v)?;
        let Some(action) = parse_action(name) else {
            match skipped_at.get(name) {
                Some(&i) => trace.skipped[i].1 += 1,
                None => {
                    let name = name.to_string();
                    self.keep(2 * name.len() + 64);
                    skipped_at.insert(name.clone(), trace.skipped.len());
                    trace.skipped.push((name, 1));
                }
            }
            return Ok(());
        };
        use TraceAction::*;
        let addr = match action {
            Oom => match self.opt_u64(role, d, k::DEVICE_FREE, "device_free")? {
                Some(v) => v,
                None => self.opt_u64(role, d, k::ADDR, "addr")?.unwrap_or(0),
            },
            Snapshot => self.opt_u64(role, d, k::ADDR, "addr")?.unwrap_or(0),
            _ => self.u64_field(role, d, k::ADDR, "addr")?,
        };
        let time_us = match d.get(k::TIME_US) {
            Val::Missing | Val::None => None,
            t => {
                let v = self.int_field(role, "time_us", t)?;
                Some(i64::try_from(v).map_err(|_| schema(role, "time_us out of range"))?)
            }
        };
        let pool = self.pool_field(role, d, k::POOL_ID, "pool_id")?;
        trace.entries.push(TraceEvent {
            action,
            addr,
            size: self.u64_field(role, d, k::SIZE, "size")?,
            stream: self.u64_field(role, d, k::STREAM, "stream")?,
            time_us,
            pool,
        });
        self.keep(std::mem::size_of::<TraceEvent>());
        Ok(())
    }

    pub(super) fn settings(&mut self, v: Val) -> R<Option<AllocatorSettings>> {
        let role = Role::Settings;
        if v == Val::None {
            return Ok(None);
        }
        let d = self.take_dict(role, v)?;
        let mut s = AllocatorSettings::default();
        let int = |b: &Self, key: &str, v: Val| -> R<i64> {
            let i = b.int_field(role, key, v)?;
            i64::try_from(i).map_err(|_| schema(role, format!("{key} out of range")))
        };
        let present = |code| Some(d.get(code)).filter(|v| *v != Val::Missing);
        if let Some(v) = present(k::ALLOC_CONF) {
            s.alloc_conf = self
                .str_val(role, "PYTORCH_CUDA_ALLOC_CONF", v)?
                .to_string();
        }
        if let Some(v) = present(k::MAX_SPLIT_SIZE) {
            s.max_split_size = int(self, "max_split_size", v)?;
        }
        if let Some(v) = present(k::GC_THRESHOLD) {
            s.garbage_collection_threshold = match v {
                Val::Float(f) => f,
                _ => int(self, "garbage_collection_threshold", v)? as f64,
            };
        }
        if let Some(v) = present(k::EXPANDABLE_SEGMENTS) {
            s.expandable_segments = self.bool_val(role, "expandable_segments", v)?;
        }
        if let Some(v) = present(k::RELEASE_LOCK) {
            s.release_lock_on_cudamalloc = self.bool_val(role, "release_lock_on_cudamalloc", v)?;
        }
        // A divisions value that is not a dict is ignored, as torch's own reader does.
        let divisions = match present(k::ROUNDUP).map(|v| (v, self.node(v))) {
            Some((v, Some(Node::Dict(_)))) => match self.take(v) {
                Node::Dict(div) => Some(div),
                _ => None,
            },
            _ => None,
        };
        for (slot, value) in divisions
            .iter()
            .flat_map(|d| d.values.iter().take(16).enumerate())
        {
            if let Some(n) = self.as_int(*value).and_then(|i| u64::try_from(i).ok()) {
                s.roundup_power2_divisions[slot] = n;
            }
        }
        self.keep(std::mem::size_of::<AllocatorSettings>() + s.alloc_conf.len());
        Ok(Some(s))
    }
}
