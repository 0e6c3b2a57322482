//! Building a [`Snapshot`] while a pickle or JSON document is read, keeping only what the
//! snapshot model holds.
//!
//! The readers ([`crate::unpickle`], [`crate::json`]) hand every value to a [`Builder`] as
//! soon as they have it. Each container is opened with the *role* its place in the document
//! gives it (the segments list, one history entry, a block, …; [`Role`]). Containers of the
//! schema become small typed nodes; a history entry or a block is decoded into its model
//! type when it is added to its list and its node is freed at once, so the document is
//! never held as a tree. Containers nothing here reads (stack `frames`, `pool_id`,
//! `compile_context`, `host_traces`, …) are [`Val::Skip`]: what is added to them is
//! dropped.
//!
//! The schema, as MemoryViz.js requires it: `segments[*].{device, address, total_size,
//! stream, blocks[*].{size, state}}` and `device_traces[d][*].{action, addr, size, stream}`
//! (`oom` entries have `device_free` instead of `addr`). Optional, with torch's meaning when
//! absent: block `address` (segment address plus the sizes before it), `requested_size`
//! (the block size), the segment's `allocated_size` / `active_size` / `requested_size`
//! (summed from its blocks), `segment_type` ("large"), `is_expandable` (false), `time_us`,
//! `device_traces` and `allocator_settings`. A bare list is read as the segments alone, as
//! `_memory_viz.py` does. Other keys are ignored; a repeated key: the last one counts.
//!
//! A schema error inside a list is kept with that list and reported only if the list ends
//! up in the snapshot (a pickle may build values it later drops). A container of the
//! schema that is used twice (shared through the pickle memo, or inside itself) is refused
//! rather than expanded: its node is gone after its first use.
//!
//! Memory: what the reader holds besides what it keeps (the memo, the stack, interned
//! strings, unfinished containers) is counted, and reading stops with an error when it
//! passes [`WORK_BASE`] plus [`WORK_PER_KEPT`] times the bytes decoded so far.

use std::collections::HashMap;

use cachalot_core::{BlockState, TraceAction};
use rustc_hash::FxHashMap;

use crate::SnapshotError;
use crate::model::{
    AllocatorSettings, Block, DeviceTrace, Segment, Snapshot, TraceEvent, parse_action, parse_state,
};

/// Device ordinals above this are refused (no machine has that many GPUs).
pub const MAX_DEVICES: u32 = 1 << 16;

/// Bytes of working memory (memo, stack, strings, unfinished containers) a document may
/// use whatever it keeps.
pub const WORK_BASE: usize = 32 << 20;

/// Further bytes of working memory allowed per byte decoded into the snapshot.
pub const WORK_PER_KEPT: usize = 4;

/// A value as the readers pass it: scalars inline, strings by interned id, containers as a
/// node of the schema or skipped. 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Val {
    /// An absent dict field (never a value of the document).
    Missing,
    None,
    Bool(bool),
    Int(i64),
    /// An integer in `[2^63, 2^64)`.
    UInt(u64),
    /// A larger integer, by index into [`Builder::big`].
    Big(u32),
    Float(f64),
    Str(u32),
    /// A container of the schema; `generation` tells a freed (used) node from its slot's next use.
    Node {
        index: u32,
        generation: u32,
    },
    /// A container whose content is not read.
    Skip(Kind),
}

/// What kind of container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Tuple,
    Dict,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::List => "list",
            Kind::Tuple => "tuple",
            Kind::Dict => "dict",
        }
    }
}

/// A container's place in the snapshot (indices for error paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The document itself: a dict, or a list (the segments).
    Root,
    Segments,
    Segment(u32),
    Blocks(u32),
    Block(u32, u32),
    DeviceTraces,
    Trace(u32),
    Entry(u32, u32),
    Settings,
    Divisions,
    /// Not read.
    Skip,
}

fn index(i: u64) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

impl Role {
    /// The role of the value under key `code` ([`key_code`]) in a dict of this role.
    pub(crate) fn key(self, code: u8) -> Role {
        match (self, code) {
            (Role::Root, k::SEGMENTS) => Role::Segments,
            (Role::Root, k::DEVICE_TRACES) => Role::DeviceTraces,
            (Role::Root, k::ALLOCATOR_SETTINGS) => Role::Settings,
            (Role::Segment(i), k::BLOCKS) => Role::Blocks(i),
            (Role::Settings, k::ROUNDUP) => Role::Divisions,
            _ => Role::Skip,
        }
    }

    /// The role of element `i` of a list of this role.
    pub(crate) fn elem(self, i: u64) -> Role {
        match self {
            Role::Root | Role::Segments => Role::Segment(index(i)),
            Role::Blocks(s) => Role::Block(s, index(i)),
            Role::DeviceTraces => Role::Trace(index(i)),
            Role::Trace(d) => Role::Entry(d, index(i)),
            _ => Role::Skip,
        }
    }

    /// Whether a container of `kind` can fill this role.
    pub(crate) fn accepts(self, kind: Kind) -> bool {
        match self {
            Role::Skip => true,
            Role::Root => kind != Kind::Tuple,
            Role::Segments | Role::Blocks(_) | Role::DeviceTraces | Role::Trace(_) => {
                kind != Kind::Dict
            }
            _ => kind == Kind::Dict,
        }
    }

    /// Whether dicts of this role keep the field `code`.
    pub(crate) fn has_field(self, code: u8) -> bool {
        fields(self).contains(&code)
    }

    fn path(self) -> String {
        match self {
            Role::Root => "<root>".into(),
            Role::Segments => "segments".into(),
            Role::Segment(i) => format!("segments[{i}]"),
            Role::Blocks(i) => format!("segments[{i}].blocks"),
            Role::Block(i, j) => format!("segments[{i}].blocks[{j}]"),
            Role::DeviceTraces => "device_traces".into(),
            Role::Trace(d) => format!("device_traces[{d}]"),
            Role::Entry(d, j) => format!("device_traces[{d}][{j}]"),
            Role::Settings => "allocator_settings".into(),
            Role::Divisions => "allocator_settings.roundup_power2_divisions".into(),
            Role::Skip => "<skipped>".into(),
        }
    }

    fn same_place(self, other: Role) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }
}

/// Codes of the dict keys the schema reads.
pub(crate) mod k {
    pub const NONE: u8 = u8::MAX;
    pub const SEGMENTS: u8 = 0;
    pub const DEVICE_TRACES: u8 = 1;
    pub const ALLOCATOR_SETTINGS: u8 = 2;
    pub const DEVICE: u8 = 3;
    pub const ADDRESS: u8 = 4;
    pub const TOTAL_SIZE: u8 = 5;
    pub const STREAM: u8 = 6;
    pub const SEGMENT_TYPE: u8 = 7;
    pub const IS_EXPANDABLE: u8 = 8;
    pub const BLOCKS: u8 = 9;
    pub const ALLOCATED_SIZE: u8 = 10;
    pub const ACTIVE_SIZE: u8 = 11;
    pub const REQUESTED_SIZE: u8 = 12;
    pub const SIZE: u8 = 13;
    pub const STATE: u8 = 14;
    pub const ACTION: u8 = 15;
    pub const ADDR: u8 = 16;
    pub const DEVICE_FREE: u8 = 17;
    pub const TIME_US: u8 = 18;
    pub const ALLOC_CONF: u8 = 19;
    pub const MAX_SPLIT_SIZE: u8 = 20;
    pub const GC_THRESHOLD: u8 = 21;
    pub const EXPANDABLE_SEGMENTS: u8 = 22;
    pub const RELEASE_LOCK: u8 = 23;
    pub const ROUNDUP: u8 = 24;
    /// `roundup_power2_divisions` interval names "1" … "32768": `INTERVAL + slot`.
    pub const INTERVAL: u8 = 32;
}

/// The code of a dict key the schema reads, or [`k::NONE`].
pub(crate) fn key_code(s: &str) -> u8 {
    match s {
        "segments" => k::SEGMENTS,
        "device_traces" => k::DEVICE_TRACES,
        "allocator_settings" => k::ALLOCATOR_SETTINGS,
        "device" => k::DEVICE,
        "address" => k::ADDRESS,
        "total_size" => k::TOTAL_SIZE,
        "stream" => k::STREAM,
        "segment_type" => k::SEGMENT_TYPE,
        "is_expandable" => k::IS_EXPANDABLE,
        "blocks" => k::BLOCKS,
        "allocated_size" => k::ALLOCATED_SIZE,
        "active_size" => k::ACTIVE_SIZE,
        "requested_size" => k::REQUESTED_SIZE,
        "size" => k::SIZE,
        "state" => k::STATE,
        "action" => k::ACTION,
        "addr" => k::ADDR,
        "device_free" => k::DEVICE_FREE,
        "time_us" => k::TIME_US,
        "PYTORCH_CUDA_ALLOC_CONF" | "PYTORCH_ALLOC_CONF" => k::ALLOC_CONF,
        "max_split_size" => k::MAX_SPLIT_SIZE,
        "garbage_collection_threshold" => k::GC_THRESHOLD,
        "expandable_segments" => k::EXPANDABLE_SEGMENTS,
        "release_lock_on_cudamalloc" => k::RELEASE_LOCK,
        "roundup_power2_divisions" => k::ROUNDUP,
        _ => match AllocatorSettings::INTERVALS.iter().position(|x| *x == s) {
            Some(i) => k::INTERVAL + i as u8,
            None => k::NONE,
        },
    }
}

const ROOT_FIELDS: &[u8] = &[k::SEGMENTS, k::DEVICE_TRACES, k::ALLOCATOR_SETTINGS];
const SEGMENT_FIELDS: &[u8] = &[
    k::DEVICE,
    k::ADDRESS,
    k::TOTAL_SIZE,
    k::STREAM,
    k::SEGMENT_TYPE,
    k::IS_EXPANDABLE,
    k::BLOCKS,
    k::ALLOCATED_SIZE,
    k::ACTIVE_SIZE,
    k::REQUESTED_SIZE,
];
const BLOCK_FIELDS: &[u8] = &[k::ADDRESS, k::SIZE, k::REQUESTED_SIZE, k::STATE];
const ENTRY_FIELDS: &[u8] = &[
    k::ACTION,
    k::ADDR,
    k::DEVICE_FREE,
    k::SIZE,
    k::STREAM,
    k::TIME_US,
];
const SETTINGS_FIELDS: &[u8] = &[
    k::ALLOC_CONF,
    k::MAX_SPLIT_SIZE,
    k::GC_THRESHOLD,
    k::EXPANDABLE_SEGMENTS,
    k::RELEASE_LOCK,
    k::ROUNDUP,
];
const DIVISION_FIELDS: &[u8] = &[
    k::INTERVAL,
    k::INTERVAL + 1,
    k::INTERVAL + 2,
    k::INTERVAL + 3,
    k::INTERVAL + 4,
    k::INTERVAL + 5,
    k::INTERVAL + 6,
    k::INTERVAL + 7,
    k::INTERVAL + 8,
    k::INTERVAL + 9,
    k::INTERVAL + 10,
    k::INTERVAL + 11,
    k::INTERVAL + 12,
    k::INTERVAL + 13,
    k::INTERVAL + 14,
    k::INTERVAL + 15,
];

fn fields(role: Role) -> &'static [u8] {
    match role {
        Role::Root => ROOT_FIELDS,
        Role::Segment(_) => SEGMENT_FIELDS,
        Role::Block(..) => BLOCK_FIELDS,
        Role::Entry(..) => ENTRY_FIELDS,
        Role::Settings => SETTINGS_FIELDS,
        Role::Divisions => DIVISION_FIELDS,
        _ => &[],
    }
}

const MAX_FIELDS: usize = 16;

/// A dict of the schema: its role and the fields it keeps, by position in [`fields`].
#[derive(Debug)]
struct DictNode {
    role: Role,
    items: u32,
    values: [Val; MAX_FIELDS],
}

impl DictNode {
    fn get(&self, code: u8) -> Val {
        match fields(self.role).iter().position(|&c| c == code) {
            Some(i) => self.values[i],
            None => Val::Missing,
        }
    }
}

/// A block as its dict says, before the segment fills in a missing address.
#[derive(Debug)]
struct RawBlock {
    address: Option<u64>,
    size: u64,
    requested_size: Option<u64>,
    state: BlockState,
}

/// A list of the schema: what it has decoded so far, or the first error in it.
#[derive(Debug)]
enum ListData {
    Segments(Vec<Segment>),
    Blocks(Vec<RawBlock>),
    DeviceTraces(Vec<DeviceTrace>),
    Trace {
        trace: DeviceTrace,
        skipped_at: HashMap<String, usize>,
    },
}

#[derive(Debug)]
struct ListNode {
    role: Role,
    kind: Kind,
    /// Elements added (including skipped history entries).
    len: u64,
    data: ListData,
    error: Option<SnapshotError>,
}

#[derive(Debug)]
enum Node {
    Free,
    Dict(Box<DictNode>),
    List(Box<ListNode>),
}

struct Slot {
    generation: u32,
    node: Node,
}

/// Bytes a live node costs (its slot and box).
const NODE_BYTES: usize = 256;

type R<T> = Result<T, SnapshotError>;

/// The snapshot being built. `Err(String)` from its methods is a fatal error of the reader
/// (the pickle does what Python's unpickler would refuse, or uses too much memory).
#[derive(Default)]
pub(crate) struct Builder {
    slots: Vec<Slot>,
    free: Vec<u32>,
    strings: Vec<Box<str>>,
    codes: Vec<u8>,
    interned: FxHashMap<Box<str>, u32>,
    pub(crate) big: Vec<i128>,
    work: usize,
    kept: usize,
}

impl Builder {
    /// Counts `bytes` of working memory; an error past the limit.
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<(), String> {
        self.work += bytes;
        if self.work > WORK_BASE + WORK_PER_KEPT * self.kept {
            return Err(format!(
                "the document needs {} MiB of working memory (memo, unfinished containers, \
                 strings) for {} MiB of snapshot decoded so far; refused (at most {} MiB + \
                 {WORK_PER_KEPT}x what is decoded; torch's snapshots need a fraction of that)",
                self.work >> 20,
                self.kept >> 20,
                WORK_BASE >> 20
            ));
        }
        Ok(())
    }

    /// Gives back working memory charged for something no longer held.
    pub(crate) fn release(&mut self, bytes: usize) {
        self.work = self.work.saturating_sub(bytes);
    }

    fn keep(&mut self, bytes: usize) {
        self.kept += bytes;
    }

    /// A string value (interned: one copy of each distinct string).
    pub(crate) fn string(&mut self, s: &str) -> Result<Val, String> {
        if let Some(&id) = self.interned.get(s) {
            return Ok(Val::Str(id));
        }
        self.charge(2 * s.len() + 64)?;
        let id = u32::try_from(self.strings.len()).map_err(|_| "more than 2^32 strings")?;
        self.strings.push(s.into());
        self.codes.push(key_code(s));
        self.interned.insert(s.into(), id);
        Ok(Val::Str(id))
    }

    /// An integer value.
    pub(crate) fn int(&mut self, v: i128) -> Result<Val, String> {
        if let Ok(i) = i64::try_from(v) {
            Ok(Val::Int(i))
        } else if let Ok(u) = u64::try_from(v) {
            Ok(Val::UInt(u))
        } else {
            self.charge(16)?;
            self.big.push(v);
            Ok(Val::Big((self.big.len() - 1) as u32))
        }
    }

    pub(crate) fn str_of(&self, v: Val) -> Option<&str> {
        match v {
            Val::Str(id) => Some(&self.strings[id as usize]),
            _ => None,
        }
    }

    /// The key code of a value used as a dict key.
    pub(crate) fn code_of(&self, v: Val) -> u8 {
        match v {
            Val::Str(id) => self.codes[id as usize],
            _ => k::NONE,
        }
    }

    fn node(&self, v: Val) -> Option<&Node> {
        match v {
            Val::Node { index, generation } => {
                let s = &self.slots[index as usize];
                (s.generation == generation && !matches!(s.node, Node::Free)).then_some(&s.node)
            }
            _ => None,
        }
    }

    fn take(&mut self, v: Val) -> Node {
        let Val::Node { index, generation } = v else {
            return Node::Free;
        };
        let s = &mut self.slots[index as usize];
        if s.generation != generation {
            return Node::Free;
        }
        s.generation = s.generation.wrapping_add(1);
        self.free.push(index);
        self.work -= NODE_BYTES;
        std::mem::replace(&mut s.node, Node::Free)
    }

    /// For a list-like value: its role and its length so far.
    pub(crate) fn list_info(&self, v: Val) -> Option<(Role, u64)> {
        match v {
            Val::Skip(Kind::List | Kind::Tuple) => Some((Role::Skip, 0)),
            _ => match self.node(v)? {
                Node::List(l) => Some((l.role, l.len)),
                _ => None,
            },
        }
    }

    /// For a dict value: its role and whether nothing was set in it yet.
    pub(crate) fn dict_info(&self, v: Val) -> Option<(Role, bool)> {
        match v {
            Val::Skip(Kind::Dict) => Some((Role::Skip, true)),
            _ => match self.node(v)? {
                Node::Dict(d) => Some((d.role, d.items == 0)),
                _ => None,
            },
        }
    }

    /// Opens a container of `kind` in `role` (skipped when the role is not read or does not
    /// take that kind).
    pub(crate) fn open(&mut self, role: Role, kind: Kind) -> Result<Val, String> {
        let role = match (role, kind) {
            (Role::Root, Kind::List) => Role::Segments,
            (r, _) => r,
        };
        if role == Role::Skip || !role.accepts(kind) {
            return Ok(Val::Skip(kind));
        }
        self.charge(NODE_BYTES)?;
        let node = if kind == Kind::Dict {
            Node::Dict(Box::new(DictNode {
                role,
                items: 0,
                values: [Val::Missing; MAX_FIELDS],
            }))
        } else {
            let data = match role {
                Role::Segments => ListData::Segments(Vec::new()),
                Role::Blocks(_) => ListData::Blocks(Vec::new()),
                Role::DeviceTraces => ListData::DeviceTraces(Vec::new()),
                _ => ListData::Trace {
                    trace: DeviceTrace::default(),
                    skipped_at: HashMap::new(),
                },
            };
            Node::List(Box::new(ListNode {
                role,
                kind,
                len: 0,
                data,
                error: None,
            }))
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].node = node;
                i
            }
            None => {
                let i = u32::try_from(self.slots.len()).map_err(|_| "too many containers")?;
                self.slots.push(Slot {
                    generation: 0,
                    node,
                });
                i
            }
        };
        Ok(Val::Node {
            index,
            generation: self.slots[index as usize].generation,
        })
    }

    /// `dict[key] = value` (a key the dict's role does not read: the value is dropped).
    pub(crate) fn set_item(&mut self, dict: Val, code: u8, value: Val) -> Result<(), String> {
        if let Val::Skip(Kind::Dict) = dict {
            return Ok(());
        }
        let Some(Node::Dict(_)) = self.node(dict) else {
            return Err(format!(
                "SETITEM(S) on {}, not a dict",
                self.describe_target(dict)
            ));
        };
        let Val::Node { index, .. } = dict else {
            unreachable!("a node")
        };
        let Node::Dict(d) = &mut self.slots[index as usize].node else {
            unreachable!("checked above")
        };
        d.items = d.items.saturating_add(1);
        if let Some(i) = fields(d.role).iter().position(|&c| c == code) {
            d.values[i] = value;
        }
        Ok(())
    }

    fn describe_target(&self, v: Val) -> String {
        match v {
            Val::Node { .. } if self.node(v).is_none() => {
                "a container already placed in the snapshot (torch never changes one after \
                 that)"
                    .into()
            }
            Val::Node { .. } => match self.node(v) {
                Some(Node::List(l)) => format!("a {}", l.kind.name()),
                _ => "a dict".into(),
            },
            other => format!("a {}", self.type_name(other)),
        }
    }

    /// `list.append(item)`: decoded into the list's model type at once.
    pub(crate) fn append(&mut self, list: Val, item: Val) -> Result<(), String> {
        if let Val::Skip(Kind::List) = list {
            return Ok(());
        }
        let Some(Node::List(l)) = self.node(list) else {
            return Err(format!(
                "APPEND(S) to {}, not a list",
                self.describe_target(list)
            ));
        };
        if l.kind == Kind::Tuple {
            return Err("APPEND(S) to a tuple, not a list".into());
        }
        self.add(list, item);
        Ok(())
    }

    /// Adds an element to a list node (also a tuple's, when it is built).
    pub(crate) fn add(&mut self, list: Val, item: Val) {
        let Val::Node { index, .. } = list else {
            return;
        };
        let Node::List(mut l) = std::mem::replace(&mut self.slots[index as usize].node, Node::Free)
        else {
            return;
        };
        let at = l.len;
        l.len += 1;
        if l.error.is_none() {
            let role = l.role.elem(at);
            if let Err(e) = self.add_to(&mut l.data, role, item) {
                l.error = Some(e);
            }
        }
        self.slots[index as usize].node = Node::List(l);
    }

    fn add_to(&mut self, data: &mut ListData, role: Role, item: Val) -> R<()> {
        match data {
            ListData::Segments(v) => {
                let d = self.take_dict(role, item)?;
                let s = self.segment(role, &d)?;
                self.keep(std::mem::size_of::<Segment>());
                v.push(s);
            }
            ListData::Blocks(v) => {
                let d = self.take_dict(role, item)?;
                let b = self.block(role, &d)?;
                self.keep(std::mem::size_of::<Block>());
                v.push(b);
            }
            ListData::DeviceTraces(v) => {
                if v.len() >= MAX_DEVICES as usize {
                    return Err(schema(
                        Role::DeviceTraces,
                        format!("more than {MAX_DEVICES} devices (at most {MAX_DEVICES} are read)"),
                    ));
                }
                v.push(self.take_trace(role, item)?);
            }
            ListData::Trace { trace, skipped_at } => {
                let d = self.take_dict(role, item)?;
                self.entry(role, &d, trace, skipped_at)?;
            }
        }
        Ok(())
    }

    fn type_name(&self, v: Val) -> &'static str {
        match v {
            Val::Missing => "nothing",
            Val::None => "None",
            Val::Bool(_) => "bool",
            Val::Int(_) | Val::UInt(_) | Val::Big(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Skip(kind) => kind.name(),
            Val::Node { .. } => match self.node(v) {
                Some(Node::List(l)) => l.kind.name(),
                Some(Node::Dict(_)) => "dict",
                _ => "container",
            },
        }
    }

    fn describe(&self, v: Val) -> String {
        match v {
            Val::Str(_) => {
                let s: String = self.str_of(v).unwrap_or("").chars().take(40).collect();
                format!("str {s:?}")
            }
            Val::Int(_) | Val::UInt(_) | Val::Big(_) => {
                format!("int {}", self.as_int(v).unwrap_or(0))
            }
            Val::Float(f) => format!("float {f}"),
            Val::Bool(b) => format!("bool {b}"),
            other => self.type_name(other).to_string(),
        }
    }

    fn as_int(&self, v: Val) -> Option<i128> {
        match v {
            Val::Int(i) => Some(i.into()),
            Val::UInt(u) => Some(u.into()),
            Val::Big(i) => Some(self.big[i as usize]),
            _ => None,
        }
    }

    /// Why `item` cannot fill `role`, when it is not a container of that role.
    fn misplaced(&self, role: Role, want: &str, item: Val) -> SnapshotError {
        let message = match item {
            Val::Node { .. } if self.node(item).is_none() => {
                "the same container appears twice in the snapshot (shared or recursive \
                 structure); torch never writes that"
                    .to_string()
            }
            Val::Node { .. } | Val::Skip(_)
                if (want == "dict") == (self.type_name(item) == "dict") =>
            {
                format!(
                    "a {} built for another place in the document (shared or recursive \
                     structure, or built out of order); torch never writes that",
                    self.type_name(item)
                )
            }
            _ => format!("expected a {want}, found {}", self.describe(item)),
        };
        schema(role, message)
    }

    fn take_dict(&mut self, role: Role, item: Val) -> R<Box<DictNode>> {
        match self.node(item) {
            Some(Node::Dict(d)) if d.role.same_place(role) => match self.take(item) {
                Node::Dict(d) => Ok(d),
                _ => unreachable!("checked above"),
            },
            _ => Err(self.misplaced(role, "dict", item)),
        }
    }

    fn take_list(&mut self, role: Role, item: Val) -> R<Box<ListNode>> {
        match self.node(item) {
            Some(Node::List(l)) if l.role.same_place(role) => match self.take(item) {
                Node::List(l) => Ok(l),
                _ => unreachable!("checked above"),
            },
            _ => Err(self.misplaced(role, "list", item)),
        }
    }

    fn take_trace(&mut self, role: Role, item: Val) -> R<DeviceTrace> {
        let l = self.take_list(role, item)?;
        if let Some(e) = l.error {
            return Err(e);
        }
        match l.data {
            ListData::Trace { trace, .. } => Ok(trace),
            _ => unreachable!("a trace list holds a trace"),
        }
    }

    // ---- fields ----

    fn int_field(&self, role: Role, key: &str, v: Val) -> R<i128> {
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

    fn u64_val(&self, role: Role, key: &str, v: Val) -> R<u64> {
        let i = self.int_field(role, key, v)?;
        u64::try_from(i).map_err(|_| {
            field_err(
                role,
                key,
                format!("{i} is out of range (expected 0 to 2^64-1)"),
            )
        })
    }

    fn required(&self, role: Role, d: &DictNode, code: u8, key: &str) -> R<Val> {
        match d.get(code) {
            Val::Missing => Err(schema(role, format!("missing key '{key}'"))),
            v => Ok(v),
        }
    }

    fn u64_field(&self, role: Role, d: &DictNode, code: u8, key: &str) -> R<u64> {
        let v = self.required(role, d, code, key)?;
        self.u64_val(role, key, v)
    }

    fn opt_u64(&self, role: Role, d: &DictNode, code: u8, key: &str) -> R<Option<u64>> {
        match d.get(code) {
            Val::Missing | Val::None => Ok(None),
            v => self.u64_val(role, key, v).map(Some),
        }
    }

    fn str_val(&self, role: Role, key: &str, v: Val) -> R<&str> {
        self.str_of(v).ok_or_else(|| {
            field_err(
                role,
                key,
                format!("expected a string, found {}", self.describe(v)),
            )
        })
    }

    fn bool_val(&self, role: Role, key: &str, v: Val) -> R<bool> {
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

    fn block(&self, role: Role, d: &DictNode) -> R<RawBlock> {
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

    fn segment(&mut self, role: Role, d: &DictNode) -> R<Segment> {
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
            blocks,
        })
    }

    /// Reads one history entry into `trace`. `skipped_at` indexes `trace.skipped` by action
    /// name, so many distinct unknown actions cost one lookup each, not a scan.
    fn entry(
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
        trace.entries.push(TraceEvent {
            action,
            addr,
            size: self.u64_field(role, d, k::SIZE, "size")?,
            stream: self.u64_field(role, d, k::STREAM, "stream")?,
            time_us,
        });
        self.keep(std::mem::size_of::<TraceEvent>());
        Ok(())
    }

    fn settings(&mut self, v: Val) -> R<Option<AllocatorSettings>> {
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

    /// The snapshot whose document is `root`.
    pub(crate) fn finish(mut self, root: Val) -> R<Snapshot> {
        let (segments_v, traces_v, settings_v) = match self.node(root) {
            Some(Node::List(l)) if l.role == Role::Segments => (root, Val::Missing, Val::Missing),
            Some(Node::Dict(d)) if d.role == Role::Root => {
                let segments = d.get(k::SEGMENTS);
                if segments == Val::Missing {
                    return Err(schema(
                        Role::Root,
                        "missing key 'segments': not a torch memory snapshot (expected the \
                         dict torch.cuda.memory._snapshot() returns)",
                    ));
                }
                (
                    segments,
                    d.get(k::DEVICE_TRACES),
                    d.get(k::ALLOCATOR_SETTINGS),
                )
            }
            _ => {
                return Err(schema(
                    Role::Root,
                    format!(
                        "expected a dict (torch.cuda.memory._snapshot()) or a list of \
                         segments, found {}",
                        self.describe(root)
                    ),
                ));
            }
        };
        let l = self.take_list(Role::Segments, segments_v)?;
        if let Some(e) = l.error {
            return Err(e);
        }
        let ListData::Segments(segments) = l.data else {
            unreachable!("a segments list holds segments")
        };
        let device_traces = match traces_v {
            Val::Missing => Vec::new(),
            v => {
                let l = self.take_list(Role::DeviceTraces, v)?;
                if let Some(e) = l.error {
                    return Err(e);
                }
                match l.data {
                    ListData::DeviceTraces(t) => t,
                    _ => unreachable!("a device_traces list holds traces"),
                }
            }
        };
        let allocator_settings = match settings_v {
            Val::Missing => None,
            v => self.settings(v)?,
        };
        Ok(Snapshot {
            segments,
            device_traces,
            allocator_settings,
        })
    }
}

fn schema(role: Role, message: impl Into<String>) -> SnapshotError {
    SnapshotError::Schema {
        path: role.path(),
        message: message.into(),
    }
}

fn field_err(role: Role, key: &str, message: String) -> SnapshotError {
    SnapshotError::Schema {
        path: format!("{}.{key}", role.path()),
        message,
    }
}
