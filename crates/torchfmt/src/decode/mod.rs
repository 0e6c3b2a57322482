//! Building a [`Snapshot`] while a pickle or JSON document is read, keeping only what the
//! snapshot model holds.
//!
//! The readers ([`crate::unpickle`], [`crate::json`]) hand every value to a [`Builder`] as
//! soon as they have it. Each container is opened with the *role* its place in the document
//! gives it (the segments list, one history entry, a block, …; [`Role`]). Containers of the
//! schema become small typed nodes; a history entry or a block is decoded into its model
//! type when it is added to its list and its node is freed at once, so the document is
//! never held as a tree. A pool id pair (`segment_pool_id`, an entry's `pool_id`) is
//! interned as soon as it is built ([`Val::Pool`]), so a pickle may share one. Containers
//! nothing here reads (stack `frames`, `compile_context`, `host_traces`, …) are [`Val::Skip`]: what is added to them is
//! dropped.
//!
//! The schema, as MemoryViz.js requires it: `segments[*].{device, address, total_size,
//! stream, blocks[*].{size, state}}` and `device_traces[d][*].{action, addr, size, stream}`
//! (`oom` entries have `device_free` instead of `addr`). Optional, with torch's meaning when
//! absent: block `address` (segment address plus the sizes before it), `requested_size`
//! (the block size), the segment's `allocated_size` / `active_size` / `requested_size`
//! (summed from its blocks), `segment_type` ("large"), `is_expandable` (false),
//! `segment_pool_id` ((0, 0)), an entry's `time_us` and `pool_id` (none), `device_traces` and
//! `allocator_settings`. A bare list is read as the segments alone, as
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

use cachalot_core::{BlockState, MempoolId};
use rustc_hash::FxHashMap;

use crate::SnapshotError;
use crate::model::{Block, DeviceTrace, Segment, Snapshot};
use crate::schema::fields;
pub(crate) use crate::schema::{Kind, Role, Val, k, key_code};

mod fields;

/// Device ordinals above this are refused (no machine has that many GPUs).
pub const MAX_DEVICES: u32 = 1 << 16;

/// Bytes of working memory (memo, stack, strings, unfinished containers) a document may
/// use whatever it keeps.
pub const WORK_BASE: usize = 32 << 20;

/// Further bytes of working memory allowed per byte decoded into the snapshot.
pub const WORK_PER_KEPT: usize = 4;

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
    /// A pool id's elements (at most two are kept).
    Pool(Vec<Val>),
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
    /// The distinct pool ids read, indexed by [`Val::Pool`].
    pools: Vec<MempoolId>,
    pool_index: FxHashMap<MempoolId, u32>,
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
                Role::SegmentPool(_) | Role::EntryPool(..) => ListData::Pool(Vec::new()),
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
            ListData::Pool(v) => v.push(item),
        }
        Ok(())
    }

    /// A pool id built whole (a pickle tuple) becomes [`Val::Pool`] at once, so the memo
    /// can share it; anything else is left as it is (and reported where it is read).
    pub(crate) fn seal(&mut self, v: Val) -> Result<Val, String> {
        let pool = match self.node(v) {
            Some(Node::List(l)) => match &l.data {
                ListData::Pool(items) => self.pool_of(items).ok(),
                _ => None,
            },
            _ => None,
        };
        match pool {
            Some(id) => {
                self.take(v);
                self.intern_pool(id)
            }
            None => Ok(v),
        }
    }

    /// The pool id `items` hold: two non-negative integers, as torch writes them.
    fn pool_of(&self, items: &[Val]) -> Result<MempoolId, String> {
        let half = |v: Val| self.as_int(v).and_then(|i| u64::try_from(i).ok());
        match items {
            [a, b] => match (half(*a), half(*b)) {
                (Some(a), Some(b)) => crate::model::pool_id(a, b),
                _ => Err(format!(
                    "expected a pair of non-negative integers (torch's MempoolId_t), found \
                     ({}, {})",
                    self.describe(*a),
                    self.describe(*b)
                )),
            },
            _ => Err(format!(
                "expected a pair (first, second) of integers (torch's MempoolId_t), found {} \
                 element{}",
                items.len(),
                if items.len() == 1 { "" } else { "s" }
            )),
        }
    }

    fn intern_pool(&mut self, id: MempoolId) -> Result<Val, String> {
        if let Some(&i) = self.pool_index.get(&id) {
            return Ok(Val::Pool(i));
        }
        self.charge(64)?;
        let i = u32::try_from(self.pools.len()).map_err(|_| "more than 2^32 pool ids")?;
        self.pools.push(id);
        self.pool_index.insert(id, i);
        Ok(Val::Pool(i))
    }

    /// The pool id in field `code` of `d` (`None` when absent or None).
    fn pool_field(
        &mut self,
        role: Role,
        d: &DictNode,
        code: u8,
        key: &str,
    ) -> R<Option<MempoolId>> {
        match d.get(code) {
            Val::Missing | Val::None => Ok(None),
            Val::Pool(i) => Ok(Some(self.pools[i as usize])),
            v @ Val::Node { .. } => {
                let place = role.key(code);
                let l = self.take_list(place, v)?;
                if let Some(e) = l.error {
                    return Err(e);
                }
                let ListData::Pool(items) = l.data else {
                    unreachable!("a pool id's list holds its elements")
                };
                self.pool_of(&items).map(Some).map_err(|m| schema(place, m))
            }
            v => Err(field_err(
                role,
                key,
                format!(
                    "expected a pair (first, second) of integers (torch's MempoolId_t), found {}",
                    self.describe(v)
                ),
            )),
        }
    }

    fn type_name(&self, v: Val) -> &'static str {
        match v {
            Val::Missing => "nothing",
            Val::None => "None",
            Val::Bool(_) => "bool",
            Val::Int(_) | Val::UInt(_) | Val::Big(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Pool(_) => "tuple",
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
