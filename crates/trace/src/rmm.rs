//! RAPIDS RMM memory-log CSV reader (`Thread,Time,Action,Pointer,Size,Stream`).
//!
//! The rules are the oracle's (`shared/oracle/README.md`, "Trace format", and
//! its `load_trace`), reproduced exactly so that a trace replays the same
//! events here and there:
//!
//! - **Lines** are split on `\n`; trailing `\n`/`\r` are dropped and lines that
//!   are then empty are skipped. Line numbers are 1-based physical lines of
//!   the (decompressed) file, header and empty lines counted.
//! - **Header.** The first non-empty line is a header if its first field
//!   contains `thread` (ASCII case-insensitive). Columns named `Action`,
//!   `Pointer`, `Size` and `Stream` (exact, case-insensitive; the last one of a
//!   name wins) take those roles; a role the header does not name keeps its
//!   default index. Without a header the order is
//!   `Thread,Time,Action,Pointer,Size,Stream`.
//! - **Fields** are split on `,` (no quoting) and trimmed of spaces, tabs,
//!   `"` and `\r` at both ends.
//! - **Every data row** must have the Action, Pointer and Size columns
//!   ([`TraceError::TooFewColumns`]) and a valid Size
//!   ([`TraceError::BadSize`], [`TraceError::SizeOverflow`]), whatever its
//!   action (the oracle checks Size before looking at the action). Size syntax
//!   is [`crate::ids::parse_number`].
//! - **Action**, ASCII case-insensitive: `allocate`/`alloc`/`malloc` give
//!   [`Record::Alloc`]; `deallocate`/`free`/`dealloc` give [`Record::Free`];
//!   the private-pool rows `pool_begin`, `pool_end`, `graph_begin`,
//!   `graph_end`, `pool_release`, and `empty_cache` and `record_stream` give
//!   their own records (the oracle's README, "Private pools, `empty_cache` and
//!   `record_stream`"); anything else containing `fail` gives
//!   [`Record::AllocFailure`]; anything else gives [`Record::Other`].
//! - **Pool rows** name a pool id in Pointer: an integer of at least 1,
//!   decimal or `0x` hex ([`TraceError::BadPoolId`] otherwise). `empty_cache`
//!   takes `0` (or a null token) for the whole cache. On `pool_begin` and
//!   `graph_begin`, Stream `*` means every stream; `record_stream` must name
//!   one stream ([`TraceError::RecordStreamAll`]).
//! - **Pointer** and **Stream** are id tokens (see [`crate::ids`]). Stream is
//!   optional: a row shorter than the Stream column is on the default stream
//!   (an *empty* Stream field, however, is a token like any other, as in the
//!   oracle). Stream is read on allocations only, Size and Stream are ignored
//!   on frees, and Pointer is ignored on failure and other rows.
//! - **Limit.** A line longer than [`MAX_LINE`] bytes is an error
//!   ([`TraceError::LineTooLong`]; the oracle has no limit).
//!
//! Every data row yields one [`Event`], skipped ones included, so a consumer
//! can count them (the oracle's `trace_stats.lines` is the number of events).
//! Reading stops at the first error.
//!
//! Differences from the oracle, none of which changes how an RMM log reads:
//! gzip is recognised by content rather than by a `.gz` name, non-numeric ids
//! are interned rather than hashed (so they can never collide), and lines
//! have a length limit.

use std::io::BufRead;
use std::iter::FusedIterator;
use std::path::{Path, PathBuf};

use crate::error::{TraceError, quote_field};
use crate::ids::{IdTable, NumberError, PtrId, StreamKey, parse_number};
use crate::pool_rows::{PoolAction, pool_id};
use crate::seal::SealCheck;

/// Longest line accepted (bytes, without the newline): far beyond any real
/// trace row, it keeps a file that is not a trace (no newlines for
/// gigabytes) from being buffered whole.
pub const MAX_LINE: usize = 16 << 20;

/// One data row of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// `allocate` / `alloc` / `malloc`.
    Alloc {
        /// Id of the allocation, to match its free.
        ptr: PtrId,
        /// Bytes requested (0 is valid: the allocator returns no pointer).
        size: u64,
        /// Stream the allocation is made on.
        stream: StreamKey,
    },
    /// `deallocate` / `free` / `dealloc`.
    Free {
        /// Id of the allocation freed.
        ptr: PtrId,
    },
    /// `pool_begin`: open pool `pool` (making it if needed) for `stream`'s
    /// allocations, every stream's if `None` (`*`).
    PoolBegin {
        /// The pool id (at least 1).
        pool: u64,
        /// The stream it takes, or every stream.
        stream: Option<StreamKey>,
    },
    /// `pool_end`: close pool `pool` and drop the reference `pool_begin` took.
    PoolEnd {
        /// The pool id.
        pool: u64,
    },
    /// `graph_begin`: start a CUDA-graph capture into pool `pool` on `stream`
    /// (every stream if `None`).
    GraphBegin {
        /// The pool id.
        pool: u64,
        /// The capture stream, or every stream.
        stream: Option<StreamKey>,
    },
    /// `graph_end`: end the capture into pool `pool`.
    GraphEnd {
        /// The pool id.
        pool: u64,
    },
    /// `pool_release`: drop one reference to pool `pool`.
    PoolRelease {
        /// The pool id.
        pool: u64,
    },
    /// `empty_cache`: of the whole cache (`None`) or of one pool.
    EmptyCache {
        /// The pool id, or `None` for the whole cache.
        pool: Option<u64>,
    },
    /// `record_stream`: the allocation `ptr` is used on `stream` too.
    RecordStream {
        /// Id of the allocation.
        ptr: PtrId,
        /// The stream that uses it.
        stream: StreamKey,
    },
    /// An action containing `fail` (RMM's `allocate failure`): the traced
    /// program's allocation failed. Not replayed.
    AllocFailure,
    /// Any other action. Not replayed.
    Other,
}

/// A [`Record`] with the line it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// 1-based physical line number (header and empty lines counted).
    pub line: u64,
    /// What the row says.
    pub record: Record,
}

/// Where the columns are (0-based field indexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    /// The Action column.
    pub action: usize,
    /// The Pointer column.
    pub pointer: usize,
    /// The Size column.
    pub size: usize,
    /// The Stream column (optional in rows).
    pub stream: usize,
}

impl Columns {
    /// The layout of a header-less file: `Thread,Time,Action,Pointer,Size,Stream`.
    pub const DEFAULT: Columns = Columns {
        action: 2,
        pointer: 3,
        size: 4,
        stream: 5,
    };

    /// Fields a data row needs at least: Action, Pointer and Size.
    pub fn required(&self) -> usize {
        self.action.max(self.pointer).max(self.size) + 1
    }
}

impl Default for Columns {
    fn default() -> Self {
        Columns::DEFAULT
    }
}

/// Streaming reader of an RMM memory-log CSV.
///
/// An [`Iterator`] of `Result<Event, TraceError>` that ends after the first
/// error. Lines are read one at a time into a reused buffer, so memory does
/// not grow with the trace (only with the number of distinct non-numeric id
/// tokens, see [`IdTable`]).
///
/// ```
/// use cachalot_trace::{Record, RmmReader};
/// let csv = "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,512,0\n1,1,free,0x1,0,0\n";
/// let events: Vec<_> = RmmReader::new(csv.as_bytes()).collect::<Result<_, _>>().unwrap();
/// assert_eq!(events.len(), 2);
/// assert!(matches!(events[0].record, Record::Alloc { size: 512, .. }));
/// assert_eq!(events[1].line, 3);
/// ```
pub struct RmmReader<R> {
    input: R,
    /// Start of a line that straddles the input's buffer boundary.
    pending: Vec<u8>,
    done: bool,
    st: State,
}

/// Everything but the input: what a line needs to be parsed.
struct State {
    path: PathBuf,
    line: u64,
    cols: Columns,
    required: usize,
    /// Fields to look at in a row: 1 + the largest of the four column indexes.
    scan: usize,
    seen_first: bool,
    header: bool,
    ids: IdTable,
    /// Data rows read so far.
    rows: u64,
    seal: SealCheck,
}

impl<R> std::fmt::Debug for RmmReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmmReader")
            .field("path", &self.st.path)
            .field("line", &self.st.line)
            .field("columns", &self.st.cols)
            .field("header", &self.st.header)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl RmmReader<Box<dyn BufRead + Send>> {
    /// Opens a trace file, plain or gzip (see [`crate::open_decompressed`]).
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        open(path)
    }
}

/// Opens an RMM CSV trace file, plain or gzip-compressed (detected by its
/// magic bytes, not its name).
pub fn open(path: &Path) -> Result<RmmReader<Box<dyn BufRead + Send>>, TraceError> {
    let input = crate::open_decompressed(path)?;
    Ok(RmmReader::with_path(input, path))
}

impl<R: BufRead> RmmReader<R> {
    /// A reader over any buffered input; I/O errors name it `<input>`.
    pub fn new(input: R) -> Self {
        Self::with_path(input, "<input>")
    }

    /// A reader over buffered input that I/O errors name `path`.
    pub fn with_path(input: R, path: impl Into<PathBuf>) -> Self {
        let mut st = State {
            path: path.into(),
            line: 0,
            cols: Columns::DEFAULT,
            required: 0,
            scan: 0,
            seen_first: false,
            header: false,
            ids: IdTable::new(),
            rows: 0,
            seal: SealCheck::default(),
        };
        st.set_columns(Columns::DEFAULT);
        RmmReader {
            input,
            pending: Vec::new(),
            done: false,
            st,
        }
    }

    /// Physical lines read so far (the line of the last event, or further
    /// when empty lines followed it).
    pub fn line(&self) -> u64 {
        self.st.line
    }

    /// The column layout in use (final once the first non-empty line has
    /// been read).
    pub fn columns(&self) -> Columns {
        self.st.cols
    }

    /// True if the first non-empty line was a header.
    pub fn has_header(&self) -> bool {
        self.st.header
    }

    /// The id table, to turn interned [`PtrId`] / [`StreamKey`] keys back
    /// into their tokens.
    pub fn ids(&self) -> &IdTable {
        &self.st.ids
    }

    /// Reads the next event; `Ok(None)` at the end of the trace. After an
    /// error every later call returns `Ok(None)`.
    pub fn read_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_inner();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn read_inner(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            let avail = match self.input.fill_buf() {
                Ok(avail) => avail,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(TraceError::Read {
                        path: self.st.path.clone(),
                        line: self.st.line,
                        source,
                    });
                }
            };
            if avail.is_empty() {
                // End of input: a last line without a newline, or the end.
                if self.pending.is_empty() {
                    return self.st.seal.finish(self.st.line).map(|()| None);
                }
                let out = self.st.line_event(&self.pending);
                self.pending.clear();
                match out {
                    Some(r) => return r.map(Some),
                    None => continue,
                }
            }
            let end = memchr::memchr(b'\n', avail);
            if self.pending.len() + end.unwrap_or(avail.len()) > MAX_LINE {
                return Err(TraceError::LineTooLong {
                    line: self.st.line + 1,
                    limit: MAX_LINE,
                });
            }
            let (used, out) = match end {
                Some(i) if self.pending.is_empty() => (i + 1, self.st.line_event(&avail[..i])),
                Some(i) => {
                    self.pending.extend_from_slice(&avail[..i]);
                    let out = self.st.line_event(&self.pending);
                    self.pending.clear();
                    (i + 1, out)
                }
                None => {
                    self.pending.extend_from_slice(avail);
                    (avail.len(), None)
                }
            };
            self.input.consume(used);
            if let Some(r) = out {
                return r.map(Some);
            }
        }
    }
}

impl<R: BufRead> Iterator for RmmReader<R> {
    type Item = Result<Event, TraceError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.read_event().transpose()
    }
}

impl<R: BufRead> FusedIterator for RmmReader<R> {}

impl State {
    fn set_columns(&mut self, cols: Columns) {
        self.cols = cols;
        self.required = cols.required();
        self.scan = self.required.max(cols.stream + 1);
    }

    /// Takes one physical line (without its `\n`): `None` for an empty or
    /// header line, else its event or error.
    #[inline]
    fn line_event(&mut self, mut text: &[u8]) -> Option<Result<Event, TraceError>> {
        self.line += 1;
        while let [rest @ .., b'\r'] = text {
            text = rest;
        }
        if text.is_empty() {
            return None;
        }
        if !self.seen_first {
            self.seen_first = true;
            if let Some(cols) = parse_header(text) {
                self.header = true;
                self.set_columns(cols);
                return None;
            }
        }
        Some(self.parse_row(text))
    }

    #[inline]
    fn parse_row(&mut self, text: &[u8]) -> Result<Event, TraceError> {
        let c = self.cols;
        let mut fields: [&[u8]; 4] = [b""; 4];
        let found = split_fields(
            text,
            [c.action, c.pointer, c.size, c.stream],
            self.scan,
            &mut fields,
        );
        let [action, ptr, size, stream] = fields;
        let stream = (found > c.stream).then_some(stream);
        if found < self.required {
            return Err(TraceError::TooFewColumns {
                line: self.line,
                expected: self.required,
                found,
                action: c.action + 1,
                pointer: c.pointer + 1,
                size: c.size + 1,
            });
        }
        let size_field = trim(size);
        let size = match parse_number(size_field) {
            Ok(v) => v,
            Err(NumberError::Invalid) => {
                return Err(TraceError::BadSize {
                    line: self.line,
                    value: quote_field(size_field),
                });
            }
            Err(NumberError::Overflow) => {
                return Err(TraceError::SizeOverflow {
                    line: self.line,
                    value: quote_field(size_field),
                });
            }
        };
        let ids = &mut self.ids;
        let record = match classify(trim(action)) {
            Action::Alloc => Record::Alloc {
                ptr: ids.ptr(trim(ptr)),
                size,
                stream: stream.map_or(StreamKey::DEFAULT, |s| ids.stream(trim(s))),
            },
            Action::Free => Record::Free {
                ptr: ids.ptr(trim(ptr)),
            },
            Action::Failure => Record::AllocFailure,
            Action::Other => Record::Other,
            Action::Pool(kind) => {
                let ptr = trim(ptr);
                let stream = stream.map(trim);
                let line = self.line;
                let number = pool_id(ptr);
                let pool_id = || match number {
                    Some(p) if p >= 1 => Ok(p),
                    _ => Err(TraceError::BadPoolId {
                        line,
                        action: kind.name(),
                        value: quote_field(ptr),
                    }),
                };
                let filter = |ids: &mut IdTable| match stream {
                    Some(b"*") => None,
                    Some(s) => Some(ids.stream(s)),
                    None => Some(StreamKey::DEFAULT),
                };
                match kind {
                    PoolAction::PoolBegin => Record::PoolBegin {
                        pool: pool_id()?,
                        stream: filter(ids),
                    },
                    PoolAction::GraphBegin => Record::GraphBegin {
                        pool: pool_id()?,
                        stream: filter(ids),
                    },
                    PoolAction::PoolEnd => Record::PoolEnd { pool: pool_id()? },
                    PoolAction::GraphEnd => Record::GraphEnd { pool: pool_id()? },
                    PoolAction::PoolRelease => Record::PoolRelease { pool: pool_id()? },
                    PoolAction::EmptyCache => Record::EmptyCache {
                        pool: match number {
                            Some(0) => None,
                            _ => Some(pool_id()?),
                        },
                    },
                    PoolAction::RecordStream => Record::RecordStream {
                        ptr: ids.ptr(ptr),
                        stream: match filter(ids) {
                            Some(s) => s,
                            None => return Err(TraceError::RecordStreamAll { line }),
                        },
                    },
                }
            }
        };
        // Only an `Other` row can be a seal row; the rest are counted.
        let other = matches!(record, Record::Other).then(|| trim(action));
        self.seal.row(other, size, self.line, self.rows == 0)?;
        self.rows += 1;
        Ok(Event {
            line: self.line,
            record,
        })
    }
}

/// Splits `text` on `,` up to field `scan - 1`, storing field `wanted[k]` in
/// `out[k]`; returns the number of fields seen (exact when below `scan`).
#[inline]
fn split_fields<'a>(
    text: &'a [u8],
    wanted: [usize; 4],
    scan: usize,
    out: &mut [&'a [u8]; 4],
) -> usize {
    const FAST: usize = 8;
    if scan <= FAST {
        // Record where the first `scan` fields end, then pick.
        let mut ends = [text.len(); FAST];
        let mut n = 1;
        for_each_comma(text, |pos| {
            ends[n - 1] = pos;
            n += 1;
            n <= scan
        });
        let n = n.min(scan);
        for (slot, &w) in out.iter_mut().zip(&wanted) {
            if w < n {
                let start = if w == 0 { 0 } else { ends[w - 1] + 1 };
                *slot = &text[start..ends[w]];
            }
        }
        return n;
    }
    let mut idx = 0;
    let mut start = 0;
    let mut put = |idx: usize, field: &'a [u8]| {
        // Roles may share an index (a header may leave a default in place).
        for (slot, &w) in out.iter_mut().zip(&wanted) {
            if w == idx {
                *slot = field;
            }
        }
    };
    let stopped = !for_each_comma(text, |pos| {
        put(idx, &text[start..pos]);
        idx += 1;
        start = pos + 1;
        idx < scan
    });
    if stopped {
        return idx;
    }
    put(idx, &text[start..]);
    idx + 1
}

/// Calls `f` with the position of each `,` in `text`, in order, while it
/// returns true; returns false if `f` stopped it.
///
/// Commas are found 8 bytes at a time (SWAR), which avoids one unpredictable
/// branch per byte.
#[inline]
fn for_each_comma(text: &[u8], mut f: impl FnMut(usize) -> bool) -> bool {
    const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const COMMAS: u64 = 0x2c2c_2c2c_2c2c_2c2c;
    let len = text.len();
    let mut base = 0;
    while base < len {
        let word = if let Some(chunk) = text.get(base..base + 8) {
            u64::from_le_bytes(chunk.try_into().unwrap_or_default())
        } else if len >= 8 {
            // Last partial chunk: load the last 8 bytes and shift the ones
            // already seen out (zero bytes come in, and are not commas).
            let last = u64::from_le_bytes(text[len - 8..].try_into().unwrap_or_default());
            last >> (8 * (base + 8 - len))
        } else {
            text.iter()
                .rev()
                .fold(0u64, |w, &b| (w << 8) | u64::from(b))
        };
        // High bit set in exactly the bytes equal to ','.
        let x = word ^ COMMAS;
        let mut mask = !(((x & LO7) + LO7) | x) & !LO7;
        while mask != 0 {
            if !f(base + (mask.trailing_zeros() / 8) as usize) {
                return false;
            }
            mask &= mask - 1;
        }
        base += 8;
    }
    true
}

/// Trims spaces, tabs, `"` and `\r` from both ends of a field.
#[inline]
fn trim(mut f: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'"' | b'\r', rest @ ..] = f {
        f = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'"' | b'\r'] = f {
        f = rest;
    }
    f
}

/// The columns named by a header line, or `None` if the line is not a header.
fn parse_header(line: &[u8]) -> Option<Columns> {
    let mut fields = line.split(|&b| b == b',').map(trim);
    let first = fields.next().unwrap_or_default();
    if !first.windows(6).any(|w| w.eq_ignore_ascii_case(b"thread")) {
        return None;
    }
    let mut cols = Columns::DEFAULT;
    for (i, name) in std::iter::once(first).chain(fields).enumerate() {
        if name.eq_ignore_ascii_case(b"action") {
            cols.action = i;
        } else if name.eq_ignore_ascii_case(b"pointer") {
            cols.pointer = i;
        } else if name.eq_ignore_ascii_case(b"size") {
            cols.size = i;
        } else if name.eq_ignore_ascii_case(b"stream") {
            cols.stream = i;
        }
    }
    Some(cols)
}

#[derive(Clone, Copy)]
enum Action {
    Alloc,
    Free,
    Pool(PoolAction),
    Failure,
    Other,
}

#[inline]
fn classify(a: &[u8]) -> Action {
    let is = |s: &[u8]| a.eq_ignore_ascii_case(s);
    match a.len() {
        8 if is(b"allocate") => return Action::Alloc,
        5 if is(b"alloc") => return Action::Alloc,
        6 if is(b"malloc") => return Action::Alloc,
        10 if is(b"deallocate") => return Action::Free,
        4 if is(b"free") => return Action::Free,
        7 if is(b"dealloc") => return Action::Free,
        _ => {}
    }
    if let Some(&p) = PoolAction::ALL.iter().find(|p| is(p.name().as_bytes())) {
        return Action::Pool(p);
    }
    if a.windows(4).any(|w| w.eq_ignore_ascii_case(b"fail")) {
        Action::Failure
    } else {
        Action::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The obvious implementation `split_fields` must agree with.
    fn naive(text: &[u8], wanted: [usize; 4], scan: usize) -> (usize, [&[u8]; 4]) {
        let fields: Vec<&[u8]> = text.split(|&b| b == b',').collect();
        let mut out: [&[u8]; 4] = [b"?"; 4];
        for (slot, &w) in out.iter_mut().zip(&wanted) {
            if let Some(f) = fields.get(w).filter(|_| w < scan) {
                *slot = f;
            }
        }
        (fields.len().min(scan), out)
    }

    fn check_split(text: &[u8], wanted: [usize; 4]) {
        let scan = wanted.iter().max().unwrap() + 1;
        let mut out: [&[u8]; 4] = [b"?"; 4];
        let n = split_fields(text, wanted, scan, &mut out);
        assert_eq!(
            (n, out),
            naive(text, wanted, scan),
            "{:?}",
            String::from_utf8_lossy(text)
        );
    }

    #[test]
    fn split_examples() {
        for text in [
            &b""[..],
            b",",
            b"a",
            b"1,0,allocate,0x1,154389504,0",
            b"1,0,allocate,0x1,154389504,0,extra,fields,here",
            b"1,0,free",
            b",,,,,,,,,,,,,,,,,,,,",
            b"12345678,",
            b"1234567,8",
            b"123456789012345,x",
            "\u{e9},\u{fffd},,\0".as_bytes(),
        ] {
            check_split(text, [2, 3, 4, 5]);
            check_split(text, [0, 0, 1, 1]);
            check_split(text, [9, 3, 4, 12]);
        }
    }

    proptest! {
        #[test]
        fn split_matches_naive(
            text in proptest::collection::vec(prop_oneof![Just(b','), any::<u8>()], 0..80),
            wanted in proptest::array::uniform4(0usize..14),
        ) {
            check_split(&text, wanted);
        }
    }

    #[test]
    fn trimming() {
        assert_eq!(trim(b"  \"x y\"\t\r"), b"x y");
        assert_eq!(trim(b"\"\""), b"");
        assert_eq!(trim(b"\x0b1\x0b"), b"\x0b1\x0b");
        assert_eq!(trim(b""), b"");
    }

    #[test]
    fn actions() {
        for a in ["allocate", "ALLOC", "Malloc"] {
            assert!(matches!(classify(a.as_bytes()), Action::Alloc), "{a}");
        }
        for a in ["deallocate", "Free", "DEALLOC"] {
            assert!(matches!(classify(a.as_bytes()), Action::Free), "{a}");
        }
        for a in ["allocate failure", "FAIL", "xfailx"] {
            assert!(matches!(classify(a.as_bytes()), Action::Failure), "{a}");
        }
        for a in ["", "fre", "allocate ", "mallocs", "fai", "free\0"] {
            assert!(matches!(classify(a.as_bytes()), Action::Other), "{a:?}");
        }
    }

    #[test]
    fn headers() {
        assert_eq!(
            parse_header(b"Thread,Time,Action,Pointer,Size,Stream"),
            Some(Columns::DEFAULT)
        );
        assert_eq!(parse_header(b"1,0,allocate,0x1,1,0"), None);
        assert_eq!(parse_header(b"x,thread"), None);
        assert_eq!(
            parse_header(b" \"my_THREAD_id\" ,SIZE, pointer ,ACTION"),
            Some(Columns {
                action: 3,
                pointer: 2,
                size: 1,
                stream: 5
            })
        );
        // Missing names keep their defaults; the last duplicate wins.
        assert_eq!(
            parse_header(b"thread,size,x,size"),
            Some(Columns {
                action: 2,
                pointer: 3,
                size: 3,
                stream: 5
            })
        );
        assert_eq!(Columns::DEFAULT.required(), 5);
    }
}
