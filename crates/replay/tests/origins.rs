//! Where each replayed operation comes from (issue #22 item 3): a CSV's operations name the
//! file's lines; a snapshot's name its history events, through the line each event has in
//! the CSV `cachalot convert` writes, and say so ([`LoadedTrace::origin`]).

use cachalot_replay::{LoadOptions, Origin, RowSource, TraceOp, load_bytes, load_input};
use cachalot_torchfmt::events::{event_at_line, event_line};

#[test]
fn csv_operations_name_their_lines() {
    let csv = "Thread,Time,Action,Pointer,Size,Stream\n\
               1,0,allocate,0x1,512,0\n\
               \n\
               1,1,free,0x1,512,0\n";
    let t = load_bytes(csv.as_bytes()).unwrap();
    assert_eq!(t.source, RowSource::CsvLines);
    let lines: Vec<u64> = t.ops.iter().map(TraceOp::line).collect();
    assert_eq!(lines, [2, 4]);
    assert_eq!(t.origin(4), Some(Origin::CsvLine(4)));
}

#[test]
fn snapshot_operations_name_their_events() {
    let path = cachalot_testkit::fixture("pickle/resnet50-train.oom-5G.pickle.gz");
    let input = load_input(&path, &LoadOptions::default()).unwrap();
    let t = &input.trace;
    assert_eq!(t.source, RowSource::SnapshotEvents);
    let events = input.snapshot_events().unwrap();
    assert_eq!(t.ops.len(), events.events.len());
    for (i, op) in t.ops.iter().enumerate() {
        assert_eq!(t.origin(op.line()), Some(Origin::SnapshotEvent(i)));
    }
    // The line of an event is its line in the converted CSV: header on line 1.
    let mut csv = Vec::new();
    cachalot_torchfmt::write_rmm_csv(&mut csv, &events.events).unwrap();
    let converted = load_bytes(&csv).unwrap();
    let converted_lines: Vec<u64> = converted.ops.iter().map(TraceOp::line).collect();
    let lines: Vec<u64> = t.ops.iter().map(TraceOp::line).collect();
    assert_eq!(lines, converted_lines);
    assert_eq!(event_at_line(event_line(7)), Some(7));
    assert_eq!(event_at_line(1), None, "line 1 is the header");
    assert_eq!(t.origin(1), None);
    // describe_line reads the event behind a line; a CSV's lines need no description.
    let last = t.ops.last().unwrap().line();
    assert!(input.describe_line(last).is_some());
}
