//! Errors of the trace readers.

use std::io;
use std::path::PathBuf;

/// Why a trace could not be read.
///
/// Parse errors carry the 1-based physical line number (of the decompressed
/// file, header and empty lines counted) and display as `line N: ...`, like
/// the oracle's exit-65 messages.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The trace file could not be opened (or its first bytes read).
    #[error("cannot open trace file {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// Reading failed part-way (I/O error, corrupt or truncated gzip data).
    #[error("{}: read error after line {line}: {source}", path.display())]
    Read {
        /// The file (or `<input>` for a reader built from a stream).
        path: PathBuf,
        /// The last line read completely (0 if none).
        line: u64,
        /// The underlying error.
        source: io::Error,
    },

    /// A data row has fewer columns than the Action, Pointer and Size columns
    /// need.
    #[error(
        "line {line}: expected at least {expected} columns (Action is column {action}, \
         Pointer {pointer}, Size {size}), found {found}"
    )]
    TooFewColumns {
        /// Line number.
        line: u64,
        /// Columns needed: 1 + the largest of the three column indexes.
        expected: usize,
        /// Columns in the row.
        found: usize,
        /// 1-based column of Action.
        action: usize,
        /// 1-based column of Pointer.
        pointer: usize,
        /// 1-based column of Size.
        size: usize,
    },

    /// A line is longer than [`crate::rmm::MAX_LINE`]: not a trace.
    #[error("line {line}: longer than {} MiB; is this an RMM CSV trace?", limit >> 20)]
    LineTooLong {
        /// Line number.
        line: u64,
        /// The limit in bytes.
        limit: usize,
    },

    /// The Size field is not a number.
    #[error("line {line}: size '{value}' is not a number (expected decimal bytes or 0x hex)")]
    BadSize {
        /// Line number.
        line: u64,
        /// The field as found (trimmed, lossy UTF-8, control characters
        /// escaped, cut after 64 characters).
        value: String,
    },

    /// A pool row's Pointer is not a pool id (an integer of at least 1).
    #[error("line {line}: {action}: Pointer must be a pool id (an integer >= 1), got '{value}'")]
    BadPoolId {
        /// Line number.
        line: u64,
        /// The row's action, as the oracle names it.
        action: &'static str,
        /// The field as found (same form as in [`TraceError::BadSize`]).
        value: String,
    },

    /// A `record_stream` row names every stream (`*`) instead of one.
    #[error("line {line}: record_stream: Stream must name one stream, not '*'")]
    RecordStreamAll {
        /// Line number.
        line: u64,
    },

    /// The Size field is a number larger than `u64::MAX`.
    #[error("line {line}: size '{value}' is larger than the maximum 18446744073709551615")]
    SizeOverflow {
        /// Line number.
        line: u64,
        /// The field as found (same form as in [`TraceError::BadSize`]).
        value: String,
    },

    /// A trace written by cachalot ([`crate::seal`]) ends before its end row, or its end row
    /// counts other rows than there are: the file was cut short.
    #[error("{}", truncated_text(*line, *expected, *found))]
    Truncated {
        /// The line where it was found out (the end row, or the last line).
        line: u64,
        /// Rows the end row announces; `u64::MAX` when the end row is missing.
        expected: u64,
        /// Rows found since the begin row.
        found: u64,
    },

    /// A data row after the end row of a trace written by cachalot.
    #[error("line {line}: a data row after the end of the trace (its end row is line {end})")]
    AfterEnd {
        /// Line number.
        line: u64,
        /// The end row's line.
        end: u64,
    },

    /// The trace is too large to hold in this process's memory: growing a table it needs
    /// was refused (an address-space limit, or the machine's memory).
    #[error(
        "line {line}: not enough memory to hold the trace: {rows} operations read, and \
         {bytes} bytes more for the {what} were refused; replay a shorter trace or raise the \
         memory limit"
    )]
    OutOfMemory {
        /// The line being read.
        line: u64,
        /// Operations held so far.
        rows: u64,
        /// What was growing.
        what: &'static str,
        /// The bytes asked for.
        bytes: u64,
    },
}

impl TraceError {
    /// The trace line the error is about, when there is one (for
    /// [`TraceError::Read`], the last line read completely).
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Open { .. } => None,
            TraceError::Read { line, .. }
            | TraceError::TooFewColumns { line, .. }
            | TraceError::LineTooLong { line, .. }
            | TraceError::BadSize { line, .. }
            | TraceError::BadPoolId { line, .. }
            | TraceError::RecordStreamAll { line }
            | TraceError::SizeOverflow { line, .. }
            | TraceError::Truncated { line, .. }
            | TraceError::AfterEnd { line, .. }
            | TraceError::OutOfMemory { line, .. } => Some(*line),
        }
    }

    /// True for a malformed trace (the oracle's exit 65), false for I/O.
    pub fn is_parse_error(&self) -> bool {
        matches!(
            self,
            TraceError::TooFewColumns { .. }
                | TraceError::LineTooLong { .. }
                | TraceError::BadSize { .. }
                | TraceError::BadPoolId { .. }
                | TraceError::RecordStreamAll { .. }
                | TraceError::SizeOverflow { .. }
                | TraceError::Truncated { .. }
                | TraceError::AfterEnd { .. }
        )
    }
}

fn truncated_text(line: u64, expected: u64, found: u64) -> String {
    if expected == u64::MAX {
        format!(
            "line {line}: the trace is truncated: it was written by cachalot, which ends a trace \
             with a {} row, and the file ends after {found} rows without one",
            crate::seal::END_ACTION
        )
    } else {
        format!(
            "line {line}: the trace is damaged: its {} row says {expected} rows, but {found} \
             came before it",
            crate::seal::END_ACTION
        )
    }
}

/// Most characters of a field quoted in an error message.
const MAX_QUOTED: usize = 64;

/// A field as shown in an error message: lossy UTF-8, control characters
/// escaped, long fields cut with `...`.
pub(crate) fn quote_field(field: &[u8]) -> String {
    let text = String::from_utf8_lossy(field);
    let mut out = String::with_capacity(field.len().min(MAX_QUOTED + 8));
    for (i, c) in text.chars().enumerate() {
        if i == MAX_QUOTED {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote_field(b"abc"), "abc");
        assert_eq!(quote_field(b"a\0b\x0b"), "a\\u{0}b\\u{b}");
        assert_eq!(quote_field(b"\xff1"), "\u{fffd}1");
        let long = quote_field(&[b'9'; 100]);
        assert_eq!(long.len(), 64 + 3);
        assert!(long.ends_with("..."));
    }
}
