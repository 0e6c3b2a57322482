//! The vocabulary of the snapshot schema the readers share: the value a reader hands the
//! [`Builder`](crate::decode::Builder) ([`Val`]), the kinds of container, the *role* a
//! container gets from its place in the document ([`Role`]), and the codes of the dict keys
//! the schema reads with the fields each role keeps ([`key_code`], `fields`).

use crate::model::AllocatorSettings;

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
    /// A pool id already read (a pair of the schema), by index into the builder's pools.
    Pool(u32),
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
    pub(crate) fn name(self) -> &'static str {
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
    /// `segments[i].segment_pool_id`.
    SegmentPool(u32),
    /// `device_traces[d][j].pool_id`.
    EntryPool(u32, u32),
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
            (Role::Segment(i), k::SEGMENT_POOL_ID) => Role::SegmentPool(i),
            (Role::Entry(d, j), k::POOL_ID) => Role::EntryPool(d, j),
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
            Role::Segments
            | Role::Blocks(_)
            | Role::DeviceTraces
            | Role::Trace(_)
            | Role::SegmentPool(_)
            | Role::EntryPool(..) => kind != Kind::Dict,
            _ => kind == Kind::Dict,
        }
    }

    /// Whether dicts of this role keep the field `code`.
    pub(crate) fn has_field(self, code: u8) -> bool {
        fields(self).contains(&code)
    }

    pub(crate) fn path(self) -> String {
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
            Role::SegmentPool(i) => format!("segments[{i}].segment_pool_id"),
            Role::EntryPool(d, j) => format!("device_traces[{d}][{j}].pool_id"),
            Role::Skip => "<skipped>".into(),
        }
    }

    pub(crate) fn same_place(self, other: Role) -> bool {
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
    pub const SEGMENT_POOL_ID: u8 = 25;
    pub const POOL_ID: u8 = 26;
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
        "segment_pool_id" => k::SEGMENT_POOL_ID,
        "pool_id" => k::POOL_ID,
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
    k::SEGMENT_POOL_ID,
];
const BLOCK_FIELDS: &[u8] = &[k::ADDRESS, k::SIZE, k::REQUESTED_SIZE, k::STATE];
const ENTRY_FIELDS: &[u8] = &[
    k::ACTION,
    k::ADDR,
    k::DEVICE_FREE,
    k::SIZE,
    k::STREAM,
    k::TIME_US,
    k::POOL_ID,
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

pub(crate) fn fields(role: Role) -> &'static [u8] {
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
