//! RMM CSV reader: format rules, line numbers, errors, gzip.

use std::io::{BufReader, Write};
use std::path::Path;

use cachalot_trace::{
    Columns, Event, IdName, PtrId, Record, RmmReader, StreamKey, TraceError, open,
    open_decompressed,
};
use flate2::Compression;
use flate2::write::GzEncoder;

const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream\n";

fn events(text: &[u8]) -> Vec<Event> {
    RmmReader::new(text)
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("unexpected error: {e}"))
}

fn records(text: &str) -> Vec<Record> {
    events(text.as_bytes())
        .into_iter()
        .map(|e| e.record)
        .collect()
}

fn lines(text: &str) -> Vec<u64> {
    events(text.as_bytes())
        .into_iter()
        .map(|e| e.line)
        .collect()
}

/// The first error, and how many events came before it.
fn error(text: &[u8]) -> (usize, TraceError) {
    let mut n = 0;
    let mut reader = RmmReader::new(text);
    for ev in reader.by_ref() {
        match ev {
            Ok(_) => n += 1,
            Err(e) => {
                assert!(reader.next().is_none(), "reader must stop after an error");
                return (n, e);
            }
        }
    }
    panic!("no error in {:?}", String::from_utf8_lossy(text));
}

fn err_msg(text: &str) -> String {
    error(text.as_bytes()).1.to_string()
}

fn alloc(ptr: u64, size: u64, stream: u64) -> Record {
    Record::Alloc {
        ptr: PtrId::from_raw(ptr),
        size,
        stream: StreamKey::from_raw(stream),
    }
}

fn free(ptr: u64) -> Record {
    Record::Free {
        ptr: PtrId::from_raw(ptr),
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn read_file(path: &Path) -> Result<Vec<Event>, TraceError> {
    open(path)?.collect()
}

#[test]
fn with_header() {
    let text = format!(
        "{HEADER}1,0,allocate,0x1,5242880,0\n1,1,allocate,0x2,1000,0x7\n1,2,deallocate,0x1,0,0\n"
    );
    let mut reader = RmmReader::new(text.as_bytes());
    let got: Vec<Event> = reader.by_ref().map(Result::unwrap).collect();
    assert!(reader.has_header());
    assert_eq!(reader.columns(), Columns::DEFAULT);
    assert_eq!(
        got,
        vec![
            Event {
                line: 2,
                record: alloc(1, 5242880, 0)
            },
            Event {
                line: 3,
                record: alloc(2, 1000, 7)
            },
            Event {
                line: 4,
                record: free(1)
            },
        ]
    );
    assert_eq!(reader.line(), 4);
}

#[test]
fn without_header() {
    let text = "1,0,allocate,0x1,100,0\n1,1,free,0x1,0,0\n";
    let mut reader = RmmReader::new(text.as_bytes());
    let got: Vec<Record> = reader.by_ref().map(|e| e.unwrap().record).collect();
    assert!(!reader.has_header());
    assert_eq!(got, vec![alloc(1, 100, 0), free(1)]);
    assert_eq!(lines(text), vec![1, 2]);
}

#[test]
fn header_detection() {
    // Any first field containing "thread", any case, after trimming.
    for h in ["thread", "THREAD", " \"Thread_ID\" ", "mythreads"] {
        let text = format!("{h},Time,Action,Pointer,Size,Stream\n1,0,alloc,1,10,0\n");
        assert_eq!(lines(&text), vec![2], "{h}");
    }
    // Only the first non-empty line can be a header.
    let msg = err_msg("\n\n1,0,alloc,1,10,0\nThread,Time,Action,Pointer,Size,Stream\n");
    assert_eq!(
        msg,
        "line 4: size 'Size' is not a number (expected decimal bytes or 0x hex)"
    );
    // "thread" in another field does not make a header.
    assert!(err_msg("x,thread,Action\n").starts_with("line 1: expected at least 5 columns"));
    // Empty lines before the header are counted.
    assert_eq!(
        lines(&format!("\n\r\n{HEADER}\n1,0,alloc,1,10,0\n")),
        vec![5]
    );
}

#[test]
fn columns_by_name() {
    let text = "thread,SIZE,Pointer,action,stream\n1,100,0x1,alloc,3\n1,0,1,FREE,9\n";
    let mut reader = RmmReader::new(text.as_bytes());
    let got: Vec<Record> = reader.by_ref().map(|e| e.unwrap().record).collect();
    assert_eq!(
        reader.columns(),
        Columns {
            action: 3,
            pointer: 2,
            size: 1,
            stream: 4
        }
    );
    assert_eq!(got, vec![alloc(1, 100, 3), free(1)]);

    // Names not in the header keep their default index (Stream stays column
    // 6 here, Pointer column 4); unknown names are ignored.
    let text = "Thread,Size,Action,Foo\n1,10,alloc,0x5,y,6\n1,10,alloc,0x6\n";
    assert_eq!(records(text), vec![alloc(5, 10, 6), alloc(6, 10, 0)]);
    // Two roles may then share a column: here Action and Size are both 3.
    let text = "Thread,Time,Size\n1,2,3,0x1,5\n";
    assert_eq!(records(text), vec![Record::Other]);
    // The last column of a name wins.
    let text = "Thread,Size,Action,Pointer,Size\n1,abc,alloc,1,12\n";
    assert_eq!(records(text), vec![alloc(1, 12, 0)]);
}

#[test]
fn stream_column_optional() {
    let text = "Thread,Time,Action,Pointer,Size\n1,0,alloc,1,10\n1,0,alloc,2,10,5\n";
    assert_eq!(records(text), vec![alloc(1, 10, 0), alloc(2, 10, 5)]);
    let r = records("1,0,alloc,1,10\n");
    assert_eq!(r, vec![alloc(1, 10, 0)]);
    let Record::Alloc { stream, .. } = r[0] else {
        unreachable!()
    };
    assert!(stream.is_default());
    assert_eq!(stream, StreamKey::DEFAULT);
}

#[test]
fn empty_stream_field_is_a_token() {
    // As in the oracle: a present but empty Stream field is the token "".
    let mut reader = RmmReader::new(&b"1,0,alloc,1,10,\n1,0,alloc,2,10, \"\" \n"[..]);
    let got: Vec<Record> = reader.by_ref().map(|e| e.unwrap().record).collect();
    let (Record::Alloc { stream: a, .. }, Record::Alloc { stream: b, .. }) = (got[0], got[1])
    else {
        unreachable!()
    };
    assert!(!a.is_default());
    assert_eq!(a, b);
    assert_eq!(reader.ids().resolve(a.raw()), Some(IdName::Token(b"")));
}

#[test]
fn every_action_spelling() {
    let mut text = String::new();
    for a in ["allocate", "alloc", "malloc", "ALLOCATE", "Alloc", "MALLOC"] {
        text += &format!("1,0,{a},1,8,0\n");
    }
    for a in [
        "deallocate",
        "free",
        "dealloc",
        "DEALLOCATE",
        "Free",
        "DeAlloc",
    ] {
        text += &format!("1,0,{a},1,8,0\n");
    }
    let got = records(&text);
    assert_eq!(&got[..6], &[alloc(1, 8, 0); 6]);
    assert_eq!(&got[6..], &[free(1); 6]);
}

#[test]
fn failure_rows() {
    let text =
        "1,0,allocate failure,0x1,100,0\n1,0,FAILED,1,1,0\n1,0,xfailx,1,1,0\n1,0, Fail ,1,1,0\n";
    assert_eq!(records(text), vec![Record::AllocFailure; 4]);
}

#[test]
fn other_rows() {
    let text =
        "1,0,,1,1,0\n1,0,fre,1,1,0\n1,0,allocated,1,1,0\n1,0,memcpy,x,0,0\n1,0,free\0,1,1,0\n";
    assert_eq!(records(text), vec![Record::Other; 5]);
}

#[test]
fn skipped_rows_still_need_columns_and_size() {
    // The oracle checks columns and Size on every data row, whatever the
    // action, frees included.
    assert_eq!(
        err_msg("1,0,allocate failure,1,abc,0\n"),
        "line 1: size 'abc' is not a number (expected decimal bytes or 0x hex)"
    );
    assert_eq!(
        err_msg("1,0,something,1,,0\n"),
        "line 1: size '' is not a number (expected decimal bytes or 0x hex)"
    );
    assert_eq!(
        err_msg("1,0,alloc,1,1,0\n1,0,free,1,x,0\n"),
        "line 2: size 'x' is not a number (expected decimal bytes or 0x hex)"
    );
    assert_eq!(
        err_msg("1,0,other\n"),
        "line 1: expected at least 5 columns (Action is column 3, Pointer 4, Size 5), found 3"
    );
}

#[test]
fn pointer_ids() {
    let text = "1,0,alloc,0x10,1,0\n1,0,free,16,0,0\n1,0,alloc,010,1,0\n1,0,alloc,0XaB,1,0\n";
    assert_eq!(
        records(text),
        vec![
            alloc(16, 1, 0),
            free(16),
            alloc(10, 1, 0),
            alloc(0xab, 1, 0)
        ]
    );

    // Tokens: equal tokens, equal ids; distinct from every number.
    let text = "1,0,alloc,abc,1,s1\n1,0,alloc,abd,1,s2\n1,0,free,abc,0,0\n1,0,alloc,s1,1,0\n";
    let mut reader = RmmReader::new(text.as_bytes());
    let got: Vec<Record> = reader.by_ref().map(|e| e.unwrap().record).collect();
    let ids = reader.ids();
    let Record::Alloc {
        ptr: abc,
        stream: s1,
        ..
    } = got[0]
    else {
        unreachable!()
    };
    let Record::Alloc {
        ptr: abd,
        stream: s2,
        ..
    } = got[1]
    else {
        unreachable!()
    };
    let Record::Free { ptr: abc2 } = got[2] else {
        unreachable!()
    };
    let Record::Alloc { ptr: s1_ptr, .. } = got[3] else {
        unreachable!()
    };
    assert_eq!(abc, abc2);
    assert_ne!(abc, abd);
    assert_ne!(s1, s2);
    assert!(abc.is_interned() && abc.number().is_none());
    assert!(!s1.is_default());
    // Pointer and stream tokens share one table.
    assert_eq!(s1_ptr.raw(), s1.raw());
    assert_eq!(ids.resolve(abc.raw()), Some(IdName::Token(b"abc")));
    assert_eq!(ids.resolve(s2.raw()).unwrap().to_string(), "s2");
    assert_eq!(ids.len(), 4);
}

#[test]
fn huge_and_signed_ids() {
    // Numbers of 2^63 or more are interned (by value); above u64::MAX they
    // are tokens. Signs follow strtoull: -1 is u64::MAX.
    let text = "1,0,alloc,0x8000000000000000,1,0\n1,0,free,9223372036854775808,0,0\n\
                1,0,alloc,-1,1,-0\n1,0,free,18446744073709551615,0,0\n\
                1,0,alloc,99999999999999999999,1,0\n1,0,alloc,+5,1,0\n";
    let mut reader = RmmReader::new(text.as_bytes());
    let got: Vec<Record> = reader.by_ref().map(|e| e.unwrap().record).collect();
    let ptr = |r: &Record| match *r {
        Record::Alloc { ptr, .. } | Record::Free { ptr } => ptr,
        _ => unreachable!(),
    };
    assert_eq!(ptr(&got[0]), ptr(&got[1]));
    assert_eq!(ptr(&got[2]), ptr(&got[3]));
    assert_ne!(ptr(&got[0]), ptr(&got[2]));
    assert!(matches!(got[2], Record::Alloc { stream, .. } if stream.is_default()));
    assert_eq!(ptr(&got[5]), PtrId::from_raw(5));
    let ids = reader.ids();
    assert_eq!(
        ids.resolve(ptr(&got[0]).raw()),
        Some(IdName::Number(1 << 63))
    );
    assert_eq!(
        ids.resolve(ptr(&got[2]).raw()),
        Some(IdName::Number(u64::MAX))
    );
    assert_eq!(
        ids.resolve(ptr(&got[4]).raw()),
        Some(IdName::Token(b"99999999999999999999"))
    );
}

#[test]
fn nil_spellings() {
    let text = "1,0,alloc,(nil),1,(nil)\n1,0,free,nullptr,0,0\n1,0,alloc,NULL,1,nullptr\n\
                1,0,free,0,0,0\n1,0,alloc,0x0,1,NULL\n";
    let got = records(text);
    assert_eq!(
        got,
        vec![
            alloc(0, 1, 0),
            free(0),
            alloc(0, 1, 0),
            free(0),
            alloc(0, 1, 0)
        ]
    );
    assert!(matches!(
        got[0],
        Record::Alloc {
            ptr: PtrId::NULL,
            ..
        }
    ));
    // The spellings are case-sensitive: these are tokens.
    for t in ["null", "Null", "(NIL)", "NULLPTR", "nil"] {
        let r = records(&format!("1,0,alloc,{t},1,{t}\n"));
        let Record::Alloc { ptr, stream, .. } = r[0] else {
            unreachable!()
        };
        assert!(ptr.is_interned() && !stream.is_default(), "{t}");
    }
}

#[test]
fn sizes() {
    let text = "1,0,alloc,1,0,0\n1,0,alloc,1,0x100,0\n1,0,alloc,1,0XFF,0\n1,0,alloc,1,00042,0\n\
                1,0,alloc,1,18446744073709551615,0\n1,0,alloc,1,0xffffffffffffffff,0\n\
                1,0,alloc,1, \"7\" ,0\n1,0,alloc,1,+9,0\n1,0,alloc,1,0x0x10,0\n";
    let sizes: Vec<u64> = records(text)
        .into_iter()
        .map(|r| match r {
            Record::Alloc { size, .. } => size,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(sizes, vec![0, 256, 255, 42, u64::MAX, u64::MAX, 7, 9, 16]);
}

#[test]
fn trimming_and_line_endings() {
    let text = "  Thread , Time , Action , Pointer , Size , Stream \r\n\r\n\
                1, 0, \"allocate\" ,\t0x1\t, \"100\" ,\"7\"\r\n\
                \t1\t,0,\tfree\t,\t1\t,0\r\r\n\
                1,0,alloc,2,3,0";
    let got = events(text.as_bytes());
    assert_eq!(
        got,
        vec![
            Event {
                line: 3,
                record: alloc(1, 100, 7)
            },
            Event {
                line: 4,
                record: free(1)
            },
            Event {
                line: 5,
                record: alloc(2, 3, 0)
            },
        ]
    );
    // A CR inside a field is not trimmed (the action is then "other").
    assert_eq!(records("1,0,all\rocate,1,10,0\n"), vec![Record::Other]);
}

#[test]
fn line_numbers() {
    let text = format!("\n{HEADER}\n\n1,0,alloc,1,1,0\n\r\n1,0,foo,1,1,0\n1,0,free,1,1,0\n\n\n");
    assert_eq!(lines(&text), vec![5, 7, 8]);
    let mut reader = RmmReader::new(text.as_bytes());
    reader.by_ref().for_each(|e| assert!(e.is_ok()));
    assert_eq!(reader.line(), 10);
}

#[test]
fn empty_inputs() {
    for text in [
        "",
        "\n",
        "\n\r\n\n",
        HEADER,
        "Thread\n\n",
        "Thread,Time,Action,Pointer,Size,Stream",
    ] {
        let mut reader = RmmReader::new(text.as_bytes());
        assert!(reader.next().is_none(), "{text:?}");
        assert!(reader.next().is_none());
    }
}

#[test]
fn error_bad_size() {
    assert_eq!(
        err_msg(&format!(
            "{HEADER}1,0,alloc,1,10,0\n\n\n\n\n1,0,allocate,0x1,abc,0\n"
        )),
        "line 7: size 'abc' is not a number (expected decimal bytes or 0x hex)"
    );
    for bad in [
        "", "0x", "0xg", "12a", "1.5", "1 0", "-", "10\x0b", "-0x5", "1e6",
    ] {
        let (n, e) = error(format!("1,0,alloc,1,10,0\n1,0,alloc,1,{bad},0\n").as_bytes());
        assert_eq!(n, 1);
        assert!(
            matches!(e, TraceError::BadSize { line: 2, .. }),
            "{bad:?}: {e}"
        );
        assert_eq!(e.line(), Some(2));
        assert!(e.is_parse_error());
    }
}

#[test]
fn error_size_overflow() {
    let e = error(b"1,0,alloc,1,18446744073709551616,0\n").1;
    assert!(matches!(e, TraceError::SizeOverflow { line: 1, .. }));
    assert_eq!(
        e.to_string(),
        "line 1: size '18446744073709551616' is larger than the maximum 18446744073709551615"
    );
    let e = error(b"\n1,0,alloc,1,0x10000000000000000,0\n").1;
    assert!(matches!(e, TraceError::SizeOverflow { line: 2, .. }), "{e}");
}

#[test]
fn error_too_few_columns() {
    assert_eq!(
        err_msg(&format!("{HEADER}1,0,alloc,0x1,10,0\n1,0,alloc,0x1\n")),
        "line 3: expected at least 5 columns (Action is column 3, Pointer 4, Size 5), found 4"
    );
    assert_eq!(
        err_msg("thread,size,pointer,action\n100,0x1,alloc\n"),
        "line 2: expected at least 4 columns (Action is column 4, Pointer 3, Size 2), found 3"
    );
    // A line of blanks is not empty: one (empty) field.
    assert_eq!(
        err_msg(&format!("{HEADER}   \n")),
        "line 2: expected at least 5 columns (Action is column 3, Pointer 4, Size 5), found 1"
    );
    let e = error(b"garbage\n").1;
    assert!(matches!(
        e,
        TraceError::TooFewColumns {
            line: 1,
            expected: 5,
            found: 1,
            ..
        }
    ));
}

#[test]
fn error_message_quotes_field_safely() {
    let msg = err_msg("1,0,alloc,1,\u{1}\u{e9},0\n");
    assert_eq!(
        msg,
        "line 1: size '\\u{1}\u{e9}' is not a number (expected decimal bytes or 0x hex)"
    );
    let long = "9".repeat(30) + &"x".repeat(100);
    let msg = err_msg(&format!("1,0,alloc,1,{long},0\n"));
    assert!(msg.contains("...'"), "{msg}");
    assert!(msg.len() < 200);
}

#[test]
fn non_utf8_bytes() {
    let text = b"1,0,alloc,\xe9\xff,10,\xfe\n1,0,free,\xe9\xff,0,0\n1,0,\xff\xfe,1,1,1\n";
    let mut reader = RmmReader::new(&text[..]);
    let got: Vec<Record> = reader.by_ref().map(|e| e.unwrap().record).collect();
    let Record::Alloc { ptr, stream, .. } = got[0] else {
        unreachable!()
    };
    assert_eq!(got[1], Record::Free { ptr });
    assert_eq!(got[2], Record::Other);
    assert!(!stream.is_default());
    assert_eq!(
        reader.ids().resolve(ptr.raw()),
        Some(IdName::Token(b"\xe9\xff"))
    );
    let e = error(b"1,0,alloc,1,\xff,0\n").1;
    assert_eq!(
        e.to_string(),
        "line 1: size '\u{fffd}' is not a number (expected decimal bytes or 0x hex)"
    );
}

#[test]
fn nul_bytes_end_numbers_like_c_strings() {
    // The oracle parses numbers with strtoull on C strings.
    assert_eq!(
        records("1,0,alloc,7\0x,12\0junk,0\n"),
        vec![alloc(7, 12, 0)]
    );
}

#[test]
fn tiny_buffers_give_same_events() {
    let text = format!(
        "{HEADER}\r\n1,0,allocate,0x1,5242880,0\n1,1,allocate,tok,1000,0x7\n\n1,2,free,0x1,0,0\n\
         1,2,allocate failure,0x1,10,0\n1,2,zzz,0x1,10,0\n1,3,free,tok,0,0"
    );
    let expect = events(text.as_bytes());
    for cap in 1..40 {
        let reader = RmmReader::new(BufReader::with_capacity(cap, text.as_bytes()));
        let got: Vec<Event> = reader.map(Result::unwrap).collect();
        assert_eq!(got, expect, "capacity {cap}");
    }
}

#[test]
fn error_line_too_long() {
    use cachalot_trace::rmm::MAX_LINE;
    // At the limit: an ordinary row (its Thread field is long).
    let mut ok = "7".repeat(MAX_LINE - 15).into_bytes();
    ok.extend_from_slice(b",0,alloc,1,10,0\n");
    assert_eq!(ok.len(), MAX_LINE + 1);
    let mut data = b"1,0,alloc,2,10,0\n".to_vec();
    data.extend_from_slice(&ok);
    assert_eq!(events(&data).len(), 2);
    assert_eq!(RmmReader::new(BufReader::new(&data[..])).count(), 2);
    // One byte more, through a slice or a small buffer: an error.
    data.insert(20, b'7');
    for reader in [
        RmmReader::new(Box::new(&data[..]) as Box<dyn std::io::BufRead>),
        RmmReader::new(Box::new(BufReader::new(&data[..]))),
    ] {
        let got: Vec<_> = reader.collect();
        assert_eq!(got.len(), 2);
        assert!(got[0].is_ok());
        let e = got[1].as_ref().unwrap_err();
        assert!(matches!(e, TraceError::LineTooLong { line: 2, .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "line 2: longer than 16 MiB; is this an RMM CSV trace?"
        );
    }
    // No newline at all.
    let junk = vec![b'x'; MAX_LINE + 100];
    let (n, e) = error(&junk);
    assert_eq!(n, 0);
    assert!(matches!(e, TraceError::LineTooLong { line: 1, .. }));
}

#[test]
fn read_event_api() {
    let mut reader = RmmReader::new(&b"1,0,alloc,1,1,0\n1,0,alloc,1,x,0\n1,0,alloc,1,1,0\n"[..]);
    assert_eq!(
        reader.read_event().unwrap(),
        Some(Event {
            line: 1,
            record: alloc(1, 1, 0)
        })
    );
    assert!(reader.read_event().is_err());
    assert_eq!(reader.read_event().unwrap(), None);
    assert!(format!("{reader:?}").contains("RmmReader"));
}

#[test]
fn gzip_and_plain_give_identical_events() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let text = format!(
        "{HEADER}1,0,allocate,0x1,5242880,0\n\n1,1,allocate,tok,1000,0x7\n1,2,free,0x1,0,0\n1,3,foo,1,2,3\n"
    );
    let plain = dir.join("t.csv");
    let gz = dir.join("t.csv.gz");
    let gz_misnamed = dir.join("gz-without-suffix.csv");
    let plain_misnamed = dir.join("plain-named.csv.gz");
    std::fs::write(&plain, &text).unwrap();
    std::fs::write(&gz, gzip(text.as_bytes())).unwrap();
    std::fs::write(&gz_misnamed, gzip(text.as_bytes())).unwrap();
    std::fs::write(&plain_misnamed, &text).unwrap();
    let expect = read_file(&plain).unwrap();
    assert_eq!(expect.len(), 4);
    assert_eq!(expect[1].line, 4);
    assert_eq!(read_file(&gz).unwrap(), expect);
    assert_eq!(read_file(&gz_misnamed).unwrap(), expect);
    assert_eq!(read_file(&plain_misnamed).unwrap(), expect);
    assert_eq!(RmmReader::open(&gz).unwrap().count(), 4);

    // Concatenated gzip members read as one file (like `gzip -dc`).
    let (a, b) = text.split_at(60);
    let mut multi = gzip(a.as_bytes());
    multi.extend(gzip(b.as_bytes()));
    let multi_path = dir.join("multi.gz");
    std::fs::write(&multi_path, multi).unwrap();
    assert_eq!(read_file(&multi_path).unwrap(), expect);

    // Files shorter than the magic.
    for (name, data) in [("empty", &b""[..]), ("one", b"\n"), ("two", b"\r\n")] {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        assert_eq!(read_file(&p).unwrap(), vec![], "{name}");
    }
}

#[test]
fn gzip_errors() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let text = format!(
        "{HEADER}{}",
        "1,0,allocate,0x1,5242880,0\n1,2,free,0x1,0,0\n".repeat(5000)
    );
    let full = gzip(text.as_bytes());

    // Truncated: events, then a read error naming the file and the line.
    let truncated = dir.join("truncated.csv.gz");
    std::fs::write(&truncated, &full[..full.len() / 2]).unwrap();
    let mut n = 0;
    let mut last = None;
    for ev in open(&truncated).unwrap() {
        match ev {
            Ok(_) => n += 1,
            Err(e) => last = Some(e),
        }
    }
    let e = last.expect("truncated gzip must fail");
    assert!(matches!(e, TraceError::Read { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("truncated.csv.gz: read error after line"),
        "{e}"
    );
    assert_eq!(e.line(), Some(n as u64 + 1));
    assert!(!e.is_parse_error());

    // Corrupt data after a valid magic.
    let corrupt = dir.join("corrupt.gz");
    let mut bad = full.clone();
    for b in &mut bad[20..200] {
        *b = !*b;
    }
    std::fs::write(&corrupt, bad).unwrap();
    let res: Result<Vec<Event>, _> = open(&corrupt).unwrap().collect();
    assert!(matches!(res, Err(TraceError::Read { .. })));

    // Only the magic.
    let magic = dir.join("magic");
    std::fs::write(&magic, b"\x1f\x8b").unwrap();
    assert!(matches!(
        read_file(&magic),
        Err(TraceError::Read { line: 0, .. })
    ));
}

#[test]
fn open_errors() {
    let missing = Path::new("/nonexistent/cachalot/trace.csv");
    let e = open(missing).unwrap_err();
    assert!(matches!(e, TraceError::Open { .. }));
    assert!(
        e.to_string()
            .starts_with("cannot open trace file /nonexistent/cachalot/trace.csv: "),
        "{e}"
    );
    assert_eq!(e.line(), None);
    assert!(open_decompressed(missing).is_err());
    // A directory opens on Linux but fails at the first read.
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    assert!(open(dir).is_err());
}

#[test]
fn a_bad_size_is_a_parse_error_with_its_line() {
    let e = RmmReader::new(&b"1,0,alloc,1,x,0\n"[..])
        .next()
        .unwrap()
        .unwrap_err();
    assert!(e.is_parse_error(), "{e}");
    assert_eq!(e.line(), Some(1));
}
