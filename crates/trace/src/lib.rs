//! Allocation-trace readers for cachalot.
//!
//! This crate only *reads* traces; it knows nothing about the allocator. The
//! replay engine consumes its events and keeps the books (live ids, counts,
//! streams).
//!
//! Formats:
//!
//! - [`rmm`]: RAPIDS RMM memory-log CSV (`Thread,Time,Action,Pointer,Size,Stream`),
//!   parsed exactly as the PyTorch oracle parses it. Use [`open`] (plain or
//!   gzip file) or [`RmmReader::new`] (any [`BufRead`]).
//!
//! Pointer and stream tokens become compact `u64` keys ([`PtrId`],
//! [`StreamKey`]): numbers below 2^63 are their own key, other tokens are
//! interned and can never collide with them (see [`ids`]).
//!
//! Other formats (PyTorch memory snapshots) are meant to become sibling
//! modules of [`rmm`], sharing [`ids`], [`error`] and [`open_decompressed`].
//!
//! ```no_run
//! use std::path::Path;
//! use cachalot_trace::Record;
//!
//! # fn main() -> Result<(), cachalot_trace::TraceError> {
//! let mut allocs = 0;
//! for event in cachalot_trace::open(Path::new("trace.csv.gz"))? {
//!     if let Record::Alloc { .. } = event?.record {
//!         allocs += 1;
//!     }
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod error;
pub mod ids;
pub mod interrupt;
pub mod output;
mod pool_rows;
pub mod rmm;
pub mod seal;
pub mod splitmix;

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

pub use error::TraceError;
pub use ids::{IdName, IdTable, PtrId, StreamKey};
pub use output::{Target, check_output, write_atomic, write_output};
pub use rmm::{Columns, Event, Record, RmmReader, open};
pub use seal::seal_csv;
pub use splitmix::SplitMix64;

/// Buffer size of the readers [`open_decompressed`] returns.
const BUF_SIZE: usize = 256 * 1024;

/// Whether `bytes` start like a gzip stream (magic bytes `1f 8b`): the one test for gzip,
/// whatever a file is called.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Reads `input` decompressed if it is gzip ([`is_gzip`] on its first bytes), as it is
/// otherwise; concatenated gzip members are read one after the other. The first bytes are not
/// read twice, so this works on pipes. Errors while reading the decompressed stream (corrupt
/// or truncated data) surface from the returned reader as [`io::Error`]s.
pub fn decompressed<'a, R: Read + Send + 'a>(
    mut input: R,
) -> io::Result<Box<dyn BufRead + Send + 'a>> {
    let mut magic = [0u8; 2];
    let mut n = 0;
    while n < magic.len() {
        match input.read(&mut magic[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let input = io::Cursor::new(magic).take(n as u64).chain(input);
    Ok(if is_gzip(&magic[..n]) {
        Box::new(BufReader::with_capacity(
            BUF_SIZE,
            flate2::read::MultiGzDecoder::new(input),
        ))
    } else {
        Box::new(BufReader::with_capacity(BUF_SIZE, input))
    })
}

/// Opens a file for reading, decompressing it on the fly if it is gzip ([`decompressed`]).
/// The reading stops with [`interrupt::Interrupted`] once a stop is asked, and a FIFO with no
/// writer yet is waited for interruptibly ([`interrupt::open_read`]).
pub fn open_decompressed(path: &Path) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let open_err = |source| TraceError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file: File = interrupt::open_read(path).map_err(open_err)?;
    decompressed(interrupt::Reader(file)).map_err(open_err)
}
