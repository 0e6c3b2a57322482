//! Truncation-evident RMM CSV: a trace written by cachalot carries a first data row
//! `cachalot_trace_begin` and a last one `cachalot_trace_end` whose Size is the number of
//! rows between them. A reader that met the first row and reaches the end of the file without
//! the second (a full disk, a killed writer, a cut download) reports
//! [`TraceError::Truncated`] instead of replaying a shorter trace that looks valid.
//!
//! Both rows are ordinary data rows of the RMM layout with an action no tool replays: the
//! oracle counts them in `other_rows` and so does [`crate::RmmReader`], so a sealed trace
//! replays the same there and here. An RMM log without the first row reads as before.

use crate::error::TraceError;

/// Action of the first data row of a sealed trace.
pub const BEGIN_ACTION: &str = "cachalot_trace_begin";
/// Action of the last data row of a sealed trace; its Size is the number of rows between.
pub const END_ACTION: &str = "cachalot_trace_end";

/// Seals an RMM CSV written whole in `csv` (a header line, then data rows, each ending in
/// `\n`): the begin row after the header, the end row with the row count at the end.
pub fn seal_csv(csv: &[u8]) -> Vec<u8> {
    let header_end = csv
        .iter()
        .position(|&b| b == b'\n')
        .map_or(csv.len(), |i| i + 1);
    let (header, rows) = csv.split_at(header_end);
    let count = rows.iter().filter(|&&b| b == b'\n').count();
    let mut out = Vec::with_capacity(csv.len() + 80);
    out.extend_from_slice(header);
    out.extend_from_slice(format!("0,0,{BEGIN_ACTION},0x0,0,0\n").as_bytes());
    out.extend_from_slice(rows);
    if !rows.is_empty() && !rows.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(format!("0,0,{END_ACTION},0x0,{count},0\n").as_bytes());
    out
}

/// What a reader has seen of a trace's seal.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SealCheck {
    /// The line of the begin row, once seen.
    begun: Option<u64>,
    /// Data rows since the begin row.
    rows: u64,
    /// The line of the end row, once seen.
    ended: Option<u64>,
}

impl SealCheck {
    /// Accounts for one data row: `other` is its trimmed action when it is an `Other` row (the
    /// only kind a seal row can be); `first` when it is the first data row.
    #[inline]
    pub fn row(
        &mut self,
        other: Option<&[u8]>,
        size: u64,
        line: u64,
        first: bool,
    ) -> Result<(), TraceError> {
        if let Some(end) = self.ended {
            return Err(TraceError::AfterEnd { line, end });
        }
        let Some(action) = other else {
            self.rows += 1;
            return Ok(());
        };
        if first && action.eq_ignore_ascii_case(BEGIN_ACTION.as_bytes()) {
            self.begun = Some(line);
        } else if self.begun.is_some() && action.eq_ignore_ascii_case(END_ACTION.as_bytes()) {
            if size != self.rows {
                return Err(TraceError::Truncated {
                    line,
                    expected: size,
                    found: self.rows,
                });
            }
            self.ended = Some(line);
        } else {
            self.rows += 1;
        }
        Ok(())
    }

    /// At the end of the input: a sealed trace must have had its end row.
    pub fn finish(&self, line: u64) -> Result<(), TraceError> {
        match (self.begun, self.ended) {
            (Some(_), None) => Err(TraceError::Truncated {
                line,
                expected: u64::MAX,
                found: self.rows,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, RmmReader};

    const CSV: &str = "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,512,0\n1,1,free,0x1,0,0\n1,2,allocate,0x2,1000,7\n";

    fn read(bytes: &[u8]) -> Result<Vec<Record>, TraceError> {
        RmmReader::new(bytes).map(|e| e.map(|e| e.record)).collect()
    }

    #[test]
    fn a_sealed_trace_reads_as_the_plain_one_plus_two_other_rows() {
        let sealed = seal_csv(CSV.as_bytes());
        let text = String::from_utf8(sealed.clone()).unwrap();
        assert!(text.ends_with("0,0,cachalot_trace_end,0x0,3,0\n"), "{text}");
        let plain = read(CSV.as_bytes()).unwrap();
        let ours = read(&sealed).unwrap();
        assert_eq!(ours.len(), plain.len() + 2);
        assert_eq!(ours[0], Record::Other);
        assert_eq!(&ours[1..4], &plain[..]);
    }

    /// Issue #10, crash 5: a truncated CSV was accepted as a shorter, valid trace.
    #[test]
    fn every_truncation_of_a_sealed_trace_is_an_error() {
        let sealed = seal_csv(CSV.as_bytes());
        let begin = CSV.find('\n').unwrap() + 1 + format!("0,0,{BEGIN_ACTION},0x0,0,0\n").len();
        // Up to the end row's Size: past it only the Stream field is lost, which changes nothing.
        let size_end = sealed.len() - ",0\n".len();
        for cut in begin..size_end {
            // A cut inside a row may also make that row malformed; either way it is an error.
            let r = read(&sealed[..cut]);
            assert!(r.is_err(), "cut at {cut}: {r:?}");
            if sealed[cut - 1] == b'\n' {
                assert!(
                    matches!(r, Err(TraceError::Truncated { .. })),
                    "cut at {cut}: {r:?}"
                );
            }
        }
        let mut longer = sealed.clone();
        longer.extend_from_slice(b"1,9,free,0x2,0,0\n");
        assert!(matches!(read(&longer), Err(TraceError::AfterEnd { .. })));
        let miscounted = String::from_utf8(sealed)
            .unwrap()
            .replace("0x0,3,0", "0x0,4,0");
        let e = read(miscounted.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("says 4 rows, but 3"), "{e}");
    }

    #[test]
    fn ordinary_logs_and_stray_markers_read_as_before() {
        assert_eq!(read(CSV.as_bytes()).unwrap().len(), 3);
        // A begin row that is not the first data row, or an end row without a begin row, is
        // just another row.
        let stray = format!("{CSV}0,0,{BEGIN_ACTION},0x0,0,0\n0,0,{END_ACTION},0x0,9,0\n");
        assert_eq!(read(stray.as_bytes()).unwrap().len(), 5);
    }
}
