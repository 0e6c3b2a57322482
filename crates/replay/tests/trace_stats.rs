//! The oracle's `trace_stats`, computed where cachalot computes them (`load.rs`): the real
//! traces in `shared/traces` against `trace_stats` recorded from the oracle, and a corpus of
//! edge cases run through the oracle itself when it is set up (`cachalot_testkit::oracle`).
//! The statistics are reported with the same function the reports use
//! ([`trace_stats_json`]).

use std::path::Path;
use std::process::Command;

use cachalot_replay::report::trace_stats_json;
use cachalot_replay::{load_bytes, load_rmm};
use cachalot_testkit::{oracle, shared, skip};
use serde_json::{Value, json};

/// The keys of `trace_stats`, in the oracle's order.
const KEYS: [&str; 11] = [
    "lines",
    "allocs",
    "frees",
    "zero_size_allocs",
    "unmatched_frees",
    "duplicate_alloc_ids",
    "trace_alloc_failures",
    "other_rows",
    "live_at_end",
    "streams",
    "bytes_requested",
];

/// `trace_stats` from its values, in [`KEYS`] order.
fn stats(v: [u64; 11]) -> Value {
    Value::Object(
        KEYS.iter()
            .zip(v)
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect(),
    )
}

/// `trace_stats` printed by the oracle for each trace (lines, allocs, frees,
/// zero_size_allocs, unmatched_frees, duplicate_alloc_ids,
/// trace_alloc_failures, other_rows, live_at_end, streams, bytes_requested).
const RECORDED: &[(&str, [u64; 11])] = &[
    (
        "models/bert-finetune-varlen.csv.gz",
        [58193, 29399, 28794, 0, 0, 0, 0, 0, 605, 0, 518171984104],
    ),
    (
        "models/gpt2-generate-varlen.csv.gz",
        [282424, 141286, 141138, 0, 0, 0, 0, 0, 148, 0, 160441545366],
    ),
    (
        "models/gpt2-train.csv.gz",
        [11940, 6192, 5748, 0, 0, 0, 0, 0, 444, 0, 255669771720],
    ),
    (
        "models/resnet50-train.csv.gz",
        [10525, 5503, 5022, 0, 0, 0, 0, 0, 481, 0, 141085755124],
    ),
    (
        "real/code_location_expandable_3gpu_oom.dev0.csv.gz",
        [4352, 2434, 1918, 0, 0, 0, 0, 0, 516, 0, 33220769567],
    ),
    (
        "real/code_location_expandable_3gpu_oom.dev1.csv.gz",
        [374, 199, 175, 0, 0, 0, 0, 0, 24, 0, 140497152357],
    ),
    (
        "real/code_location_expandable_3gpu_oom.dev2.csv.gz",
        [598, 392, 206, 0, 0, 0, 0, 0, 186, 0, 36302718306],
    ),
    (
        "real/cs336_bcrafton.csv.gz",
        [4102, 2162, 1940, 0, 0, 0, 0, 0, 222, 0, 11680970248],
    ),
    (
        "real/cs336_kkaitlyn_ctx128_fullstep.csv.gz",
        [12664, 6770, 5894, 0, 0, 0, 0, 0, 876, 0, 94234854970],
    ),
    (
        "real/cs336_magma.csv.gz",
        [3440, 1721, 1719, 0, 0, 0, 0, 0, 2, 0, 58890300607],
    ),
    (
        "real/cs336_nothanmin_snapshot.csv.gz",
        [12647, 6488, 6159, 0, 0, 0, 0, 0, 329, 0, 44829606765],
    ),
    (
        "real/cs336_wedsonlin_medium_ctx1024_inference.csv.gz",
        [2560, 1280, 1280, 0, 0, 0, 0, 0, 0, 0, 56655331424],
    ),
    (
        "real/cs336_wedsonlin_medium_ctx1024_train.csv.gz",
        [14523, 7591, 6932, 0, 0, 0, 0, 0, 659, 0, 166521770119],
    ),
    (
        "real/cs336_wedsonlin_medium_ctx128_train.csv.gz",
        [12393, 6526, 5867, 0, 0, 0, 0, 0, 659, 0, 34448091337],
    ),
    (
        "real/ftcourse_cranberrii.csv.gz",
        [6830, 3505, 3325, 0, 0, 0, 0, 0, 180, 0, 28040399084],
    ),
    (
        "real/select_n_multistream.csv.gz",
        [6111, 3058, 3053, 0, 0, 0, 0, 0, 5, 9, 887393327144],
    ),
    (
        "synthetic/random-4streams.csv.gz",
        [100000, 50000, 50000, 0, 0, 0, 0, 0, 0, 3, 401682880679],
    ),
];

#[test]
fn real_traces_match_recorded_oracle_stats() {
    let Some(shared) = shared() else {
        return skip("no shared/ directory");
    };
    for (name, want) in RECORDED {
        let path = shared.join("traces").join(name);
        if !path.exists() {
            skip(format!("{} missing", path.display()));
            continue;
        }
        let got = load_rmm(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(trace_stats_json(&got.stats), stats(*want), "{name}");
    }
}

#[test]
fn stats_of_a_small_trace() {
    let text = "Thread,Time,Action,Pointer,Size,Stream\n1,0,alloc,1,10,0\n1,0,alloc,1,0,s\n\
                1,0,free,1,0,0\n1,0,free,1,0,0\n1,0,allocate failure,2,5,0\n1,0,x,2,5,0\n\
                1,0,alloc,3,7,0x9\n";
    let t = load_bytes(text.as_bytes()).unwrap();
    assert_eq!(
        trace_stats_json(&t.stats),
        stats([7, 3, 1, 1, 1, 1, 1, 1, 1, 2, 17])
    );
}

/// Edge cases, each compared with the oracle's verdict. The `g*` cases come
/// from a random generator of slightly broken traces.
const CORPUS: &[(&str, &[u8])] = &[
    ("bigptr", b"1,0,alloc,99999999999999999999,10,0\n1,0,free,99999999999999999999,0,0\n1,0,alloc,0x8000000000000000,10,0\n1,0,free,9223372036854775808,0,0\n"),
    ("bigsize", b"1,0,alloc,1,99999999999999999999,0\n"),
    ("blank", b"\n\n\r\n"),
    ("cr_only", b"\r\r\n1,0,alloc,1,10,0\r\r\n"),
    ("dblhex", b"1,0,alloc,1,0x0x10,0\n1,0,alloc,0x0x2,5,0\n1,0,free,2,0,0\n"),
    ("dupcol", b"Thread,Size,Action,Pointer,Size\n1,5,alloc,1,abc\n"),
    ("dupe", b"1,0,alloc,1,10,0\n1,0,alloc,1,10,0\n1,0,free,1,0,0\n1,0,free,1,0,0\n"),
    ("empty", b""),
    ("emptystream", b"1,0,alloc,0x1,10,\n1,0,alloc,0x2,10, \n1,0,alloc,0x3,10,\"\"\n"),
    ("fail", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate failure,0x1,100,0\n1,0,FAILED,0x1,100,0\n1,0,something,0x1,100,0\n1,0,free,0x1,abc,0\n"),
    ("failsize", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate failure,0x1,abc,0\n"),
    ("fewcols", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,alloc,0x1\n"),
    ("fewcols_other", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,foo\n"),
    ("freesize", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,alloc,0x1,10,0\n\n1,0,free,0x1,x,0\n"),
    ("hdr_action_far", b"Thread,a,b,c,d,e,f,g,h,Action,Pointer,Size\n1,a,b,c,d,e,f,g,h,alloc,1,10\n1,alloc,1,10\n"),
    ("hdr_only", b"Thread,Time,Action,Pointer,Size,Stream\n"),
    ("hdr_stream_far", b"Thread,Action,Pointer,Size,a,b,c,d,e,f,g,Stream\n1,alloc,1,10,a,b,c,d,e,f,g,5\n1,alloc,2,10\n"),
    ("hdrcase", b"THREAD_ID,time,ACTION,POINTER,SIZE,STREAM\n1,0,Alloc,1,10,3\n"),
    ("hdrdup_action", b"Thread,Action,Action,Pointer,Size\n1,alloc,foo,1,10\n"),
    ("hdrlater", b"1,0,alloc,1,10,0\nThread,Time,Action,Pointer,Size,Stream\n"),
    ("hexbad", b"1,0,alloc,1,0x,0\n"),
    ("latin1", b"1,0,alloc,\xe9\xff,10,\xfe\n1,0,free,\xe9\xff,0,0\n"),
    ("manycol", b"1,0,alloc,1,10,0,a,b,c,d,e,f,g\n"),
    ("maxsize", b"1,0,alloc,1,0xffffffffffffffff,0\n"),
    ("midcr", b"1,0,all\rocate,1,10,0\n"),
    ("negsize", b"1,0,alloc,1,-1,0\n"),
    ("nil", b"1,0,alloc,(nil),10,0\n1,0,free,nullptr,0,0\n1,0,alloc,NULL,10,0\n1,0,free,0,0,0\n1,0,alloc,null,10,0\n1,0,free,0x0,0,0\n"),
    ("nohdr", b"1,0,allocate,0x1,100,0\n1,1,free,0x1,0,0\n"),
    ("nonl_last", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,alloc,1,10,0"),
    ("nostream", b"Thread,Time,Action,Pointer,Size\n1,0,alloc,0x1,10\n1,0,alloc,0x2,10,5\n"),
    ("notfirst", b"x,thread,Action\n1,0,alloc,1,10,0\n"),
    ("nul", b"1,0,alloc,1,12\0junk,0\n1,0,alloc,2,5,0\0\n"),
    ("nul2", b"1,0,alloc\0,1,12,0\n"),
    ("onecol", b"hello\n"),
    ("othersize", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,foo,0x1,,0\n"),
    ("partialhdr", b"Thread,Time,Size\n1,2,3,0x1,5\n"),
    ("reorder", b"thread,size,pointer,action\n100,0x1,alloc\n0,1,FREE\n200,abc,malloc\n0,abc,dealloc\n"),
    ("samenum", b"1,0,alloc,0x10,10,0\n1,0,free,16,0,0\n1,0,alloc,010,10,0\n1,0,free,10,0,0\n"),
    ("signs", b"1,0,alloc,-1,10,-0\n1,0,free,18446744073709551615,0,0\n1,0,alloc,+5,+10,0\n1,0,free,5,0,0\n"),
    ("size_space_mid", b"1,0,alloc,1,1 0,0\n"),
    ("size_ws", b"1,0,alloc,1, 0x10 ,0\n"),
    ("spaceline", b"Thread,Time,Action,Pointer,Size,Stream\n   \n"),
    ("spaceline2", b"   \n1,0,alloc,1,10,0\n"),
    ("spaces_quotes", b"  Thread , Time , Action , Pointer , Size , Stream \n\n1, 0, \"allocate\" ,\t0x1\t, \"100\" ,\"7\"\r\n1,1,Deallocate,1,0,0\r\n"),
    ("streams_order", b"1,0,alloc,1,10,7\n1,0,free,1,0,9\n1,0,alloc,2,10,0x7\n1,0,alloc,3,10,8\n"),
    ("tabs", b"\t1\t,0,\talloc\t,\t1\t,\t10\t,\t0\t\n"),
    ("tokens", b"1,0,alloc,abc,10,s1\n1,0,alloc,abd,10,s2\n1,0,free,abc,0,0\n1,0,alloc,,10,s1\n1,0,free,,0,0\n"),
    ("vt", b"1,0,alloc,1,\x0b10,0\n"),
    ("vt2", b"1,0,alloc,1,10\x0b,0\n"),
    ("zero", b"1,0,alloc,1,0,0\n1,0,free,1,0,0\n"),
    ("g0000", b"Thread,Time,Action,Pointer,Size,Stream\n1, 0\t,alloc,0x3,1,0x0\n1,0,allocate,0,18446744073709551615\n1,0,\"Alloc\",18446744073709551616,1048576,16\n1,0,ALLOCATE,0x4,1048576,6\n1,0,FREE,0x1,512\r\n1,0,free,0x6,1048576,0x6\n1,0,mallocx,9223372036854775808,1,0x0\n1,0,deallocate,0,1048576, 6\t\n\n\n1,0,alloc,0X1f,0,\"0x2\"\n 1\t, 0\t,\"ALLOCATE\",0x2,1\r,18446744073709551616\n1,0,ALLOCATE,,1048576\n 1\t,0, allocate\t,6,512,0x3\n\"1\",0,mallocx,0x1,1048576,0x3\n 1\t,0,ALLOCATE,null,null,3\n1,0,alloc,2,\"1\",007\n1,0,dealloc,4,4096,6\n1, 0\t,\"Alloc\",0x0, 0\t\n1,0,,3,1,0x0\n1,0,allocate,\"0x6\",512\n1,0, Free\0\t,0x8000000000000000, 512\t,0x1\n\"1\",0,Alloc, 0x1\t,1048576,-0\n1,\"0\",alloc,0,512,0x2\n1,\"0\",malloc, 0x\t,1048576,1 0\n1,0,free,0x3,1,0x0\n1,\"0\",allocate,-0x5,1048576,0x5\r\n"),
    ("g0001", b"Thread,Time,Action,Pointer,Size,Stream\n\n1,0,alloc ,,1,0x5\n\n1,0,mallocx,0x0x2,1,0x5\n\n1,0,malloc,3\r,nullptr, 0x0\t\n\n 1\t,0,ALLOCATE,0,1 0,abc\n\n1,0, alloc \t,3,1048576, 0x0\t\n\n1,0,Alloc,2\r,512,0x6\n\n1,0,free,\"6\",0,5\n\n1,0,deallocate,\"0x\",4096,0x2\n\n1,0\r,mallocx,0x3,4096, (nil)\t\n\n1,0,free,0x4, (nil)\t\n\n1,0,free,12\0z,0\n\n 1\t,0,malloc,0x0,1048576,2\n\n 1\t,0,ALLOCATE,0x2,1048576,0x3\n\n1, 0\t,free,0x6,512,0x2\n\n1,0,\"ALLOCATE\",\"5\",1048576,5\n\n 1\t,0, ALLOCATE\t,-0,1,3"),
    ("g0002", b"1,0,Alloc,5,4096,0x3\n1,0,alloc,2\r,0,0x\n1, 0\t,free,0x5,\"4096\",0x0\n1,0,ALLOCATE, 5\t,1,0x3\n1,0,FREE,1,1048576,0x1\n1,0, Alloc\t,0x1,0,\"0x6\"\n1,0,dealloc,0x4,\"512\"\n1,0,ALLOCATE,0x1\n 1\t,0,Alloc,007,1048576,0x3,extra\n1,0,allocate,0x1,512,4\n1,0,allocate,0x4,512,0x5\n1,0,malloc,0x1,0, 0x3\t\n1,0,alloc,007,1,3\n1,0,dealloc,\x0b5,1,5\n1,0,FREE,5\x0b,512\n1,0,fail,\x0b5,1048576,\"0x3\"\n1,0, malloc\t, 0x0\t, 1048576\t, 0x3\t\n\"1\",\"0\",deallocate,12\0z,512,\"6\"\n1,0,,0x4, 512\t,0x6\n"),
    ("g0003", b"Thread,Time,Action,Pointer,Size,Stream\r\n1, 0\t,alloc,5,0,0x0\r\n1,0,Alloc,0X1f,0\r\n1,0,ALLOCATE,0x4,1048576,0x5\r\n1,0,deallocate,\"(nil)\",1048576,2\r\n1,0,Free\0,9223372036854775808,4096\r,0x3\r\n1,0,\"dealloc\",\"0x0\",1, 6\t\r\n1,0,malloc,+3,1048576,0x2\r\n1,0, FREE\t, 9223372036854775808\t,0,\"1\"\r\n"),
    ("g0004", b"Thread,Time,Action,Pointer,Size\n\n\n\n1,0,ALLOCATE,0x2,512,16\n\n\"1\",0,\"FREE\",0x3,-0,\n\n\n\n1,0,FREE, 0x3\t,512,0x4\n\n1,0,Alloc,0xg,\"512\",2\n\n1,0,allocate,0x0,1048576,16\n\na,b\n\n1,0,allocate,0xg,1,0x6\n\n1,0,alloc,2,0,0x\n\n1\r,0,deallocate,5,1048576\n\n"),
    ("g0005", b"1,0,x,16,512,0x6\n\n1,0,Alloc,0x10,4096\n\n1,0,ALLOCATE\r,0\r,1, 3\t\n\n1,0,malloc,4,4096,0x0\n\n 1\t,0,free,0x0,0\r,\"+3\"\n\n1,0,Free\0,9223372036854775808\r,1048576,0x3\n\n1,0,deallocate, 0x1\t,512\n\n 1\t,0,ALLOCATE,0x4,1,\"0\"\n\n1,0,ALLOCATE, 0x10\t,4096,6\n\n\"1\",0,alloc,\"NULL\",1048576,0x6\n\n1,0,free,5,4096,4\n\n1,0,ALLOCATE, 5\t,1048576,\"0x6\"\n\n"),
    ("g0006", b"1,0,Free\0\r,0x,0,5\r\n1, 0\t,alloc,0x0, 1048576\t,0x1\r\n1,0,Alloc,0x2,1\r\n1,0,deallocate\r\n1\r,0,dealloc,2,\"4096\"\r\n1,0,FREE,0x2,1048576,5\r\n 1\t,0,Alloc,0x1,512,0x0\r\n1,0\r,Alloc,0x10,512,0\r\n 1\t,0,ALLOCATE,4,9223372036854775808,0x2\r\n 1\t,0,dealloc,0x2,1,0x0\r\n 1\t,\"0\",ALLOCATE,0x1,1048576\r\n1,0,deallocate,0x5,1048576,0xg\r\n1,0,dealloc, 0x2\t,512,0x6\r\n1,0, dealloc\t,(nil),0x10,3\r\n\r\n"),
    ("g0007", b" 1\t,0,alloc,0x5,512,1 0\n\n1,0,free,0x4,0,18446744073709551616\n\n1,0,FAILED,0x5,4096,\"1\"\n\n1,0,FREE,0x6,4096,\"0x1\"\n\n 1\t,0,malloc, 0\t, 0\t\n\n1, 0\t,Alloc,\"0x4\",1,0\n\n1,0,ALLOCATE,6, 512\t\n\n1,0,ALLOCATE,16,0,0\n\n\n\n1,0,deallocate,0x6,4096\r\n\n1,0,free, \x0b5\t,\"512\",0x2\r\n\n1,0\r,Alloc,0x5,1,0x4\n\n1,0,Alloc,2,4096,0x0\n\n1,0,FAILED,0,1,0x-2\n\n1,0,Alloc,0,1,0x4,extra\n\n1,0\r,mallocx, 0x4\t,0,1,extra\n\n 1\t,0,ALLOCATE,\"0X1f\", 0\t\n\n1,0,Alloc,0x-2,0,3\n\n1,0,allocate failure,18446744073709551616\n\n1,0,Alloc,0x,0,0x4\n\n1,0,alloc,0x4,512,null\n\n1,0\r,deallocate,99999999999999999999,1048576,0x0\n\n1,0,\"dealloc\",4,1048576,5\n\n1,0,mallocx,0x4,4096,2\n\n1,0, free\t,0x5, 1048576\t,99999999999999999999\n\n1,0\r,dealloc,4,1048576,0x3\n\n"),
    ("g0008", b" 1\t,0,deallocate,16,4096,0x3\n\"1\",\"0\", deallocate\t,1 0\r,1,\n1,\"0\",dealloc\r,-0\r,\"512\",\"0x3\"\n1,0,fre,\x0b5,0x,0x2\n1,0,ALLOCATE,0x2,512,0x0\n1, 0\t,free,0X1f,512,0x6\n1,0,malloc,0x10,1,0x1\n"),
    ("g0009", b"Thread,Time,Action,Pointer,Size\r\n1,0,FREE, 0x1\t,512,\"0x0\"\r\n1,0,free,0x1,512, 18446744073709551615\t\r\n1,0,FREE,\"6\",0\r\n1,0,free, 4\t,1,0\r\n\r\n1,0,\"free\",0x1,512, NULL\t\r\n 1\t,0,ALLOCATE,1,1\r\n1,0,FREE,(nil), \t,3\r\n1,0,alloc,1,1048576,0x4\r\n\r\n1,0,dealloc,0x2,4096,0x0\r\n1,0,,\"\x0b5\",4096\r\n1,0,FREE,0x10,1\r\n\r\n1, 0\t,alloc,-0,512\r\n\"1\"\r\n1,0,ALLOCATE, 1\t,0, 0x5\t\r\n1,0,Alloc,18446744073709551616,0\r\n1,0,deallocate,+3,0,\"0x6\"\r\n 1\t,0,allocate,0x2,\"1\",0x5\r\n1,0,,2,4096,0x1\r\n1,0,malloc,\"0x0\",4096,0x1\r\r\n 1\t,0,allocate,5,4096,0x0,extra\r\n1,0, dealloc\t, 3\t, 0\t\r\n1,0,FREE,0x2,1,0x0x2\r\n1,0\r,fail,5\x0b,4096\r,5,extra\r\n1,0,deallocate,5,4096,6\r\n\"1\", 0\t,ALLOCATE,0x3,4096,0x1\r\n1,0,allocate,0x0,4096,0x0\r\n 1\t,0,allocate,5,4096,4\r\n"),
    ("g0010", b"Thread,Time,Action,Pointer,Size,Stream\r\n1,0,free,0x4,\"1\",0x4, extra\t\r\n1, 0\t,fre,0x-2,0,0x3\r\n\r\n1,0,FREE\r, 0x-2\t,0,1\r\n1,0,free,0x6,12\0z\r\n1,0,alloc , 0x3\t,1048576,4\r\n1,0,alloc,NULL,+3,\"4\"\r\n1,0,dealloc,0x8000000000000000,0,-1, extra\t\r\n"),
    ("g0011", b" 1\t, 0\t,fre,12\0z,1048576\n\n1,0,deallocate,0x1\r, 0\t,4\n\n1,0,free,0x2,4096, 0x0\t\n\n1,0,free,3,1048576,0x5\n\n1,0,ALLOCATE,0x4,1\n\n1, 0\t,dealloc,1,1,0x3\n\n1,0,deallocate,12\0z,4096,0x1\n\n1,0,deallocate,2,512,1\n\n1,0, malloc\t,-0,1,0x3\n\n1,0,deallocate\r, 0x-2\t, 1048576\t,6\n\n1,0,FREE,0x5, 4096\t,(nil)\n\n1,0, allocate\t,99999999999999999999,0,0x2\n\n1,\"0\",alloc,0x-2,1048576,0x6\n\n1,0,dealloc,\"5\x0b\",1048576\r,5\n\n1,0,Alloc\r,5,1048576,0x3\n\n1,0,\"alloc\",-0x5,0,0x1\n\n1,0,malloc,16,4096,1 0\n\n1, 0\t,deallocate,6,null,0x0\n\n1, 0\t,Alloc,0x0,1,5\n\n1,0,\"malloc\", 4\t,4096,0x1\n\n1,0,ALLOCATE,2,\"NULL\"\n\n 1\t,0,free,0x2,512,0x2\n\n1,0,deallocate,-1,1,0x5\n\n1,0,deallocate,null,4096,0x2\n\n"),
    ("g0012", b"\0\xff,\x80\n1,0,FREE,0x2,0,0x1\n1,0,fre,0x2,512, 0x1\t\n1,0,allocate failure,2,512\r,-1\n\n\"1\", 0\t,fail,0x5,0,\n1,0,allocate, 0\t,512,1 0\n1,0,ALLOCATE,3,0x,0x4\r\n1, 0\t,dealloc,null,4096,6\n1,0,malloc,\x0b5,0,4\n1,0,free,5\r,4096,5\n1,0,ALLOCATE,0x3,\"512\",0x4\n1,0,FREE, NULL\t,1048576,0\n1,0,allocate,12\0z,4096,-0\n1, 0\t,deallocate,0,4096\n1, 0\t,,-0x5\r,4096,0x5\n1,0, free\t,4,1,0x8000000000000000\n1, 0\t,dealloc,1, 1\t,0x0\n1,0,malloc,2\r, 1\t,0X1f\n1,0,ALLOCATE,1 0,1,0x0\n1,0,ALLOCATE,\x0b5, 4096\t,2\n1,0,alloc ,0x5,512, 0x1\t\n1,0,ALLOCATE,-0,0\n1,0,malloc,0x5,-0x5,9223372036854775808\n1,0,\"allocate\",0x0,512, 6\t\n1,0,free,0x0x2,1048576,3\n1,0,FREE,0x1, 1048576\t\n1,0,alloc,(nil),512,-0x5\n1,0,deallocate,5,4096, 0x1\t\n\n"),
    ("g0013", b"Thread,Time,Action,Pointer,Size,Stream\n\n\n\n1,0, Alloc\t,\"(nil)\",0,0x6\n\n1,0,Alloc,6,0x8000000000000000\n\n1, 0\t,\"deallocate\",0x1, 0\t,0x0\n\n1,0,Alloc,18446744073709551615, 512\t, 0x2\t\n\n\n\n1,0\r,ALLOCATE,0x3,4096, 0x6\t\n\n\"1\",0,dealloc,0x6,0,2\n\n1,0,Alloc,0x6,\"4096\"\n\n1,\"0\",Alloc,\"5\",1048576\r,0x1\n\n1,\"0\",alloc ,0x1,512, 0x5\t\n\n1,0,Free\0\r,0x0,0,0x1\n\n1,0,FREE, 0\t, 1\t\n\n1,0,deallocate, 0x2\t,\"12\0z\", 0x6\t\n\n1,0,dealloc,007,007, -0\t\n\n\n\n1,0,dealloc,0x2,,0x5\n\n1,0,ALLOCATE,0x5,1,3\n\n1,0,\"FREE\",1,1,0x4\n\n1,0,deallocate,NULL, 007\t,0x4\n\n1,0, Alloc\t,6,512, 0x1\t\n\n\"1\",0,free,-0x5,1048576, 0x0\t\n\n"),
    ("g0014", b"Thread,Time,Action,Pointer,Size,Stream\n\n1,0,free,0x0,512\r\n\n1,0,FREE,0x-2,1,18446744073709551615\n\n1,0, FREE\t,0xg,1048576\n\n\n\n1,0, fail\t,0,512,4\n\n1\r,0\r,ALLOCATE,2,512,0\n\n1,0,\"dealloc\",99999999999999999999\r,1048576\r,0x4\n\n1,0,ALLOCATE,null,4096,0x3\n\n1,0,free,0x2\r,4096,0x3\n\n1, 0\t,deallocate,0x4,0,0x4\n\n1,0,ALLOCATE,18446744073709551616,512,2\n\n1, 0\t,allocate,0x6,1,5\n\n1,0,Alloc,0x0, 1\t,0x1\n\n\n\n1,0\r,malloc, 0x4\t,0,007\n\n1, 0\t,Alloc,0x6,-0, 6\t\n\n\"1\",0,deallocate,0x3,1, 0x6\t\n\n1,0,malloc,007,4096,0x6\n\n1\n\n1,0,free,0x6,512,+3\n\n1,0, malloc\t,NULL,4096,\"0x6\"\n\n1,0,alloc, 0x6\t,1048576,0x5\n\n1,0,FREE,0x0,4096,\"0x4\"\n\n1,0,\"Alloc\",0x10,\"1\", 0x2\t"),
    ("g0015", b"thread,Size,Pointer,Other,Stream,Action\n 1\t,0, free\t,0x2,512,4,\"extra\"\n1, 0\t,\"FREE\",0x2,4096,0x2\n1,0,FAILED,1,1,0\n1,0,deallocate,1 0, 1\t,0x5\n 1\t,0,dealloc,0x5,1,+3\n1,0,\"allocate\",\"0x8000000000000000\",512,\"0x3\"\n1,0,Alloc,0x4,1048576,3\n1,\"0\",fail,2,4096,0x3\n 1\t,0,FREE,2, 4096\t,0x2,extra\n1,0,malloc,6,512,0x6\n1,0,\"alloc\",+3,0,0x5\n 1\t,\"0\",FREE,0x4,0,6\n1,0,FREE, 16\t,16,2\n\"1\",0,free,18446744073709551615,1048576, 0x4\t"),
    ("g0016", b"Thread,Time,Action,Pointer,Size,Stream\n\n\"1\",0,free,0x0,4096\n\n1,0,malloc,6,1, 0xg\t\n\n1,0,free,-1,0\n\n1,0,FREE,0x0,0,0x3\n\n1,0\r,alloc,0x0,4096,0x1\n\n1, 0\t,dealloc,0x3,1,3\n\n1,0,malloc,\"0x3\",512,1\n\n1,0,allocate,\"007\", 0\t,\"5\"\n\n1,0,allocate,0x1,1,0x4\n\n1\n\n1,0,malloc,0x0,512,0x5\n\n1,0,\"dealloc\",0x2,0\n\n1,0,Alloc,16,4096,1\n\n1\r,0,x,0x5,4096,5\x0b\n\n1,0,alloc,007,4096\n\n1,0,Alloc,2, 1\t,\"0x6\"\n\n1,0,free,nullptr,1048576,0x1\n\n1,0, FREE\t, 0x3\t,1, 2\t\n\n1,0,fail, (nil)\t,512,\"3\"\n\n1,0, free\t,0x4,512,0x5\n\n1,0, FREE\t,18446744073709551616,512,0x3,extra\n\n1,0,alloc ,0,1, 0\t\n\n\"1\",0,deallocate,0x6,18446744073709551616\n\n1,0,dealloc,0x3,512,0x4\n\n1, 0\t,Free\0,\"0x0\",\"4096\",0x0,extra\n\n\n\n1\r, 0\t,alloc,\x0b5,\"1048576\",0x1\n\n 1\t,0,alloc ,\"0x1\",2,0x6\n\n"),
    ("g0017", b"1,\"0\",\"ALLOCATE\",0x6,512,0\n1,0,malloc,0x3, 4096\t,0x6\n"),
    ("g0018", b"Thread,Time,Action,Pointer,Size,Stream\n\n 1\t,0,malloc,0x1,1,4\n\n1,0,allocate,0x8000000000000000,1,1\n\n1,0,free,4,1\r,2\n\n 1\t,0,alloc,0X1f,512,3\n\n1,0,free,0x-2,512,0x1\n\n\n\n 1\t,0,alloc,0x6,9223372036854775808,3\n\n1,0,dealloc\r,,18446744073709551615,0x5\n\n1,0,ALLOCATE, 0x5\t,4096,6\r\n\n1,0,FREE,-0,1048576, 18446744073709551616\t\n\n1, 0\t,alloc,\"0x10\", 1\t,0x6\n\n1,0,FREE,0x5,16,3\n\n1,0,malloc,-0x5,0,99999999999999999999,extra\n\n"),
    ("g0019", b"\"1\",\"0\",ALLOCATE,0x2,1,0x3\r\n 1\t,0,free\r,5\r,4096,0x2\r\n1, 0\t,deallocate,0x4,1048576,4\r\n1,0,allocate,3,4096,0x4\r\n1,0,alloc, 1\t, 0x\t,0x0\r\n1,0,dealloc,+3,0\r\n1,0,dealloc,0x2,1048576,1\r\n1\r,0,deallocate,0x1,1048576,0x6\r\n1, 0\t,free,6,1,\"0x3\"\r\n\r\n1,0,dealloc,0x2,512,0x1\r\n1,0,mallocx,-0,4096,6\r\n1,0,ALLOCATE,1,4096, 0x2\t\r\n1,\"0\",free,0x-2,1,3\r\n 1\t,0,deallocate,0x0,4096, 0x3\t\r\n\0\xff,\x80\r\n"),
    ("g0020", b"Thread,Time,Action,Pointer,Size,Stream\n1,\"0\",free, 6\t,\"512\"\n\"1\",0,allocate, 1\t,1\r,3\n1,0,free,9223372036854775808,0,1 0\n1,0,alloc,\"0x0\",0,1\n"),
    ("g0021", b" 1\t,0,alloc,0x2,1048576,\n 1\t,0,FREE,\"9223372036854775808\",12\0z\n\n1,0, FREE\t,3, 1048576\t, 4\t\n1,\"0\",free,5,0x8000000000000000\r,0x4\n1,0,alloc,0x4,1048576,0x2\n1,0,alloc,\"0x3\",1048576,0xg\n1,\"0\",free,-1,512, 2\t\n1,0, \t,0x4, 512\t,6,extra\n1,0,malloc,007,1048576\r,abc\n1\r,0,alloc,0x3,1,0x0\n1,0,ALLOCATE,6\r,-1, 2\t\n1, 0\t,FREE,0x0,4096,0xg\n\"1\",0,malloc,0x2,4096,0x5\n1\r,0,free,0x6,0,3\n1,0,malloc,0x1,512,0x0\n1,\"0\", dealloc\t, 3\t,512,0x0\n1,0, dealloc\t,0x4,1048576,6\n1,0,FREE,,1,1\n\"1\",0,\"dealloc\",0x5,1048576,2\n1,0,allocate,0x4, 4096\t,0x2\n1, 0\t,FAILED,2,512,\x0b5\n1,0,allocate,3,0,3\n1, 0\t,alloc, 18446744073709551615\t,1\n1,0,free,0x6\r,4096,0x6\n1,0,ALLOCATE, nullptr\t, 1\t,0x5\n1,0,mallocx,+3,1,\x0b5\n1,0,ALLOCATE,0x0, 1\t,0x3\n"),
    ("g0022", b"1,0,fre, 0x1\t,1,0x6\n\n 1\t,0,ALLOCATE,\x0b5,0\n\n1,0,deallocate,(nil),4096,0x1\n 1\t, 0\t,FREE,0x6,1,0x3\n1,0,deallocate\r,18446744073709551615,0,0x1\n1,0,Alloc,0x1,4096,0x1, extra\t\n1, 0\t,deallocate,007,4096,0x4\n 1\t,0,\"deallocate\",0x2,1,007\n1,0,Alloc,0x5\n1,0,alloc,1,4096,12\0z\n1,0,malloc,0x6,1048576,0x4\n1,0,alloc,18446744073709551616,1048576\n1,0, FREE\t,4,1\r,0x3\n1,0,\"allocate\",0x4,1048576,1\n1,0,FAILED,\"\",512, 0x5\t\n\n1,0,dealloc,3,1048576,0x5\n1,0,FREE,\"0x0\",1048576, 16\t\n1,0\r,ALLOCATE,2,4096,0x0\n1, 0\t,Alloc,99999999999999999999,1048576\n"),
    ("g0023", b"Thread,Time,Action,Pointer,Size\n1,0,mallocx,1,1,0x6\n\n 1\t,0,malloc,1,1048576\n\"1\",0, Alloc\t,18446744073709551615,1048576,0x5\n"),
];

/// The oracle's verdict on a trace: its `trace_stats`, or the line of its exit-65 error.
#[derive(Debug, PartialEq)]
enum Verdict {
    Stats(Value),
    ErrorAt(u64),
}

fn oracle_verdict(oracle: &Path, trace: &Path) -> Option<Verdict> {
    let out = Command::new(oracle).arg(trace).output().ok()?;
    match out.status.code() {
        Some(0) => {
            let json: Value = serde_json::from_slice(&out.stdout).ok()?;
            let mut v = [0u64; 11];
            for (slot, key) in v.iter_mut().zip(KEYS) {
                *slot = json["trace_stats"][key].as_u64()?;
            }
            Some(Verdict::Stats(stats(v)))
        }
        Some(65) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let line = err
                .trim()
                .trim_start_matches("torch_oracle: ")
                .strip_prefix("line ")?
                .split(':')
                .next()?
                .parse()
                .ok()?;
            Some(Verdict::ErrorAt(line))
        }
        _ => None,
    }
}

fn my_verdict(data: &[u8]) -> Verdict {
    match load_bytes(data) {
        Ok(t) => Verdict::Stats(trace_stats_json(&t.stats)),
        Err(e) => {
            assert!(e.is_parse_error(), "{e}");
            let line = e.line().unwrap();
            assert!(e.to_string().starts_with(&format!("line {line}: ")));
            Verdict::ErrorAt(line)
        }
    }
}

#[test]
fn edge_cases_match_the_oracle() {
    let oracle = match oracle() {
        Ok(o) => o,
        Err(why) => return skip(why),
    };
    let scratch = cachalot_testkit::scratch();
    let dir = scratch.path();
    let mut failures = Vec::new();
    for (name, data) in CORPUS {
        let path = dir.join(format!("{name}.csv"));
        std::fs::write(&path, data).unwrap();
        let want = oracle_verdict(&oracle, &path);
        let got = my_verdict(data);
        if want.as_ref() != Some(&got) {
            failures.push(format!("{name}: oracle {want:?}, mine {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn corpus_loads_without_the_oracle() {
    // Whatever the oracle says, every case reads to an end without panicking, and errors are
    // parse errors with a line.
    for (_, data) in CORPUS {
        let _ = my_verdict(data);
    }
}
