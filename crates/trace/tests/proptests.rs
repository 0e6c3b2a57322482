//! Property tests: arbitrary input never panics; generated traces read back
//! exactly.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};

use cachalot_trace::{Event, IdName, IdTable, Record, RmmReader, TraceError};
use proptest::prelude::*;

/// Reads everything, checking the iterator's contract on the way: lines
/// increase, nothing follows an error. Returns the events and the error.
fn drain<R: std::io::BufRead>(mut reader: RmmReader<R>) -> (Vec<Event>, Option<TraceError>) {
    let mut events: Vec<Event> = Vec::new();
    let mut error = None;
    for ev in reader.by_ref() {
        match ev {
            Ok(ev) => {
                assert!(error.is_none(), "event after an error");
                if let Some(prev) = events.last() {
                    assert!(ev.line > prev.line, "lines must increase");
                }
                events.push(ev);
            }
            Err(e) => {
                assert!(error.is_none(), "two errors");
                let _ = e.to_string();
                error = Some(e);
            }
        }
    }
    assert!(reader.next().is_none());
    (events, error)
}

/// Bytes that look a bit like a trace, to get past the first checks often.
fn trace_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => Just(b','),
        2 => Just(b'\n'),
        1 => Just(b'\r'),
        1 => Just(b' '),
        1 => Just(b'"'),
        1 => Just(b'x'),
        1 => Just(0u8),
        6 => b'0'..=b'9',
        2 => b'a'..=b'f',
        2 => any::<u8>(),
    ];
    let words = prop_oneof![
        Just(b"alloc".to_vec()),
        Just(b"free".to_vec()),
        Just(b"allocate failure".to_vec()),
        Just(b"Thread,Time,Action,Pointer,Size,Stream\n".to_vec()),
        Just(b"thread,size,pointer,action\n".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        Just(b"(nil)".to_vec()),
        Just(b"0x".to_vec()),
        proptest::collection::vec(byte, 1..8),
    ];
    proptest::collection::vec(words, 0..120).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        drain(RmmReader::new(&bytes[..]));
    }

    #[test]
    fn trace_like_bytes_never_panic(bytes in trace_like_bytes(), cap in 1usize..64) {
        let (events, err) = drain(RmmReader::new(&bytes[..]));
        // Same result whatever the buffer size.
        let (events2, err2) = drain(RmmReader::new(BufReader::with_capacity(cap, &bytes[..])));
        prop_assert_eq!(events, events2);
        prop_assert_eq!(err.map(|e| e.to_string()), err2.map(|e| e.to_string()));
    }

    #[test]
    fn random_gzip_body_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut data = vec![0x1f, 0x8b, 0x08, 0x00];
        data.extend(bytes);
        let dec = flate2::read::MultiGzDecoder::new(&data[..]);
        drain(RmmReader::new(BufReader::new(dec)));
    }
}

/// An id token as written in the trace, and what it must read back as.
#[derive(Debug, Clone)]
enum Tok {
    Dec(u64),
    Hex(u64, bool),
    Nil(&'static str),
    Word(String),
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Dec(v) => v.to_string(),
            Tok::Hex(v, false) => format!("{v:#x}"),
            Tok::Hex(v, true) => format!("0X{v:X}"),
            Tok::Nil(s) => (*s).to_string(),
            Tok::Word(w) => w.clone(),
        }
    }

    fn name(&self) -> IdName<'_> {
        match self {
            Tok::Dec(v) | Tok::Hex(v, _) => IdName::Number(*v),
            Tok::Nil(_) => IdName::Number(0),
            Tok::Word(w) => IdName::Token(w.as_bytes()),
        }
    }
}

fn tok() -> impl Strategy<Value = Tok> {
    // Small values so that ids repeat (frees find their allocations, ids
    // written in different spellings meet).
    let small = 0u64..8;
    prop_oneof![
        3 => small.clone().prop_map(Tok::Dec),
        3 => (small, any::<bool>()).prop_map(|(v, up)| Tok::Hex(v, up)),
        1 => any::<u64>().prop_map(Tok::Dec),
        1 => (any::<u64>(), any::<bool>()).prop_map(|(v, up)| Tok::Hex(v, up)),
        1 => prop_oneof![Just("(nil)"), Just("nullptr"), Just("NULL")].prop_map(Tok::Nil),
        2 => "[a-zA-Z_][a-zA-Z0-9_.:]{0,6}"
            .prop_filter("not a null spelling", |w| !matches!(w.as_str(), "nullptr" | "NULL"))
            .prop_map(Tok::Word),
    ]
}

#[derive(Debug, Clone)]
enum Kind {
    Alloc { stream: Option<Tok> },
    Free,
    Fail,
    Other,
}

#[derive(Debug, Clone)]
struct Row {
    kind: Kind,
    /// Action spelling index and letter-case mask.
    spelling: (usize, u32),
    ptr: Tok,
    size: u64,
    size_hex: bool,
    /// Blank lines written before the row.
    blanks: Vec<&'static str>,
    /// Padding around fields (spaces, tabs, quotes).
    pad: (&'static str, &'static str),
}

fn row() -> impl Strategy<Value = Row> {
    let kind = prop_oneof![
        4 => proptest::option::of(tok()).prop_map(|stream| Kind::Alloc { stream }),
        3 => Just(Kind::Free),
        1 => Just(Kind::Fail),
        1 => Just(Kind::Other),
    ];
    let size = prop_oneof![3 => 0u64..5000, 1 => any::<u64>()];
    let blank = prop_oneof![Just(""), Just("\r"), Just("\r\r")];
    let pad = prop_oneof![Just(""), Just(" "), Just("\t"), Just("\""), Just(" \" ")];
    (
        kind,
        (0usize..6, any::<u32>()),
        tok(),
        size,
        any::<bool>(),
        proptest::collection::vec(blank, 0..2),
        (pad.clone(), pad),
    )
        .prop_map(|(kind, spelling, ptr, size, size_hex, blanks, pad)| Row {
            kind,
            spelling,
            ptr,
            size,
            size_hex,
            blanks,
            pad,
        })
}

fn action_text(kind: &Kind, (idx, case): (usize, u32)) -> String {
    let list: &[&str] = match kind {
        Kind::Alloc { .. } => &["allocate", "alloc", "malloc"],
        Kind::Free => &["deallocate", "free", "dealloc"],
        Kind::Fail => &["allocate failure", "FAIL", "out_of_memory_failure"],
        Kind::Other => &["memcpy", "", "reserve", "allocated", "frees", "realloc"],
    };
    let word = list[idx % list.len()];
    word.chars()
        .enumerate()
        .map(|(i, c)| {
            if case >> (i % 32) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// Writes the rows as CSV; returns the text and the line of each row.
fn write_csv(rows: &[Row], header: bool, crlf: bool, final_newline: bool) -> (String, Vec<u64>) {
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = String::new();
    let mut line = 0;
    let mut lines = Vec::new();
    if header {
        out += "Thread,Time,Action,Pointer,Size,Stream";
        out += eol;
        line += 1;
    }
    for (i, r) in rows.iter().enumerate() {
        for b in &r.blanks {
            out += b;
            out += "\n";
            line += 1;
        }
        let (l, rp) = r.pad;
        let size = if r.size_hex {
            format!("{:#x}", r.size)
        } else {
            r.size.to_string()
        };
        let mut fields = vec![
            "7".to_string(),
            i.to_string(),
            action_text(&r.kind, r.spelling),
            r.ptr.text(),
            size,
        ];
        match &r.kind {
            Kind::Alloc { stream: Some(s) } => fields.push(s.text()),
            Kind::Alloc { stream: None } => {}
            _ => fields.push("0".into()),
        }
        let fields: Vec<String> = fields.iter().map(|f| format!("{l}{f}{rp}")).collect();
        out += &fields.join(",");
        line += 1;
        lines.push(line);
        if i + 1 < rows.len() || final_newline {
            out += eol;
        }
    }
    (out, lines)
}

/// Checks events against the rows they were written from.
fn check(rows: &[Row], lines: &[u64], events: &[Event], ids: &IdTable) {
    assert_eq!(events.len(), rows.len());
    // Keys must be equal exactly when the names are.
    let mut by_name: HashMap<String, u64> = HashMap::new();
    let mut by_key: HashMap<u64, String> = HashMap::new();
    let mut same = |name: IdName<'_>, raw: u64| {
        let n = format!("{name:?}");
        assert_eq!(*by_name.entry(n.clone()).or_insert(raw), raw, "{n}");
        assert_eq!(*by_key.entry(raw).or_insert(n.clone()), n);
        assert_eq!(ids.resolve(raw), Some(name));
    };
    for ((row, &line), ev) in rows.iter().zip(lines).zip(events) {
        assert_eq!(ev.line, line);
        match (&row.kind, ev.record) {
            (Kind::Alloc { stream: want }, Record::Alloc { ptr, size, stream }) => {
                assert_eq!(size, row.size);
                same(row.ptr.name(), ptr.raw());
                match want {
                    None => assert!(stream.is_default()),
                    Some(t) => {
                        same(t.name(), stream.raw());
                        assert_eq!(stream.is_default(), t.name() == IdName::Number(0));
                    }
                }
            }
            (Kind::Free, Record::Free { ptr }) => same(row.ptr.name(), ptr.raw()),
            (Kind::Fail, Record::AllocFailure) | (Kind::Other, Record::Other) => {}
            (k, r) => panic!("row {k:?} read as {r:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn written_trace_reads_back(
        rows in proptest::collection::vec(row(), 0..60),
        header in any::<bool>(),
        crlf in any::<bool>(),
        final_newline in any::<bool>(),
        cap in 1usize..100,
    ) {
        let (text, lines) = write_csv(&rows, header, crlf, final_newline);
        let mut reader = RmmReader::new(BufReader::with_capacity(cap, text.as_bytes()));
        let events: Vec<Event> = reader.by_ref().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(reader.has_header(), header);
        check(&rows, &lines, &events, reader.ids());
    }

    #[test]
    fn gzip_round_trip(rows in proptest::collection::vec(row(), 0..40), header in any::<bool>()) {
        let (text, lines) = write_csv(&rows, header, false, true);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        let gz = enc.finish().unwrap();
        let mut plain = String::new();
        flate2::read::MultiGzDecoder::new(&gz[..]).read_to_string(&mut plain).unwrap();
        prop_assert_eq!(&plain, &text);
        let mut reader = RmmReader::new(BufReader::new(flate2::read::MultiGzDecoder::new(&gz[..])));
        let events: Vec<Event> = reader.by_ref().collect::<Result<_, _>>().unwrap();
        check(&rows, &lines, &events, reader.ids());
    }
}
