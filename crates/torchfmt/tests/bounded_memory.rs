//! What reading a snapshot allocates at its peak, next to what it keeps (issue #12): a
//! counting global allocator follows the live heap bytes while the reader runs. Real
//! snapshots (torch's pickles, users' JSON with stack frames) peak at a small multiple of
//! the decoded snapshot; hostile gzip streams (memo bombs, stack bombs, unique strings,
//! junk lists) are refused or read with a peak far below their decompressed size.
//!
//! One test function, so that no other test allocates while one is measured.

#![allow(unsafe_code)] // the counting allocator: `GlobalAlloc` is an unsafe trait

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufReader, Write};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use cachalot_torchfmt::decode::WORK_BASE;
use cachalot_torchfmt::{Snapshot, read_snapshot, read_snapshot_from};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged;
// the counters only add and subtract sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from this allocator (so from the system's) with `layout`.
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; the caller gives a valid `new_size`.
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            if new_size > layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Runs `f`; returns its result and the most heap bytes live at once above what was live
/// before it (what it returns included).
fn peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let r = f();
    (r, PEAK.load(Relaxed) - base)
}

/// Heap bytes a snapshot holds.
fn kept(s: &Snapshot) -> usize {
    use std::mem::size_of;
    let mut n = s.segments.capacity() * size_of::<cachalot_torchfmt::Segment>();
    for seg in &s.segments {
        n += seg.blocks.capacity() * size_of::<cachalot_torchfmt::Block>();
    }
    n += s.device_traces.capacity() * size_of::<cachalot_torchfmt::DeviceTrace>();
    for t in &s.device_traces {
        n += t.entries.capacity() * size_of::<cachalot_torchfmt::TraceEvent>();
        n += t
            .skipped
            .iter()
            .map(|(a, _)| a.capacity() + 32)
            .sum::<usize>();
    }
    n
}

/// A gzip stream of `prefix`, `unit` repeated `times` times, then `suffix`.
fn gzip(prefix: &[u8], unit: &[u8], times: usize, suffix: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(prefix).unwrap();
    let chunk: Vec<u8> = unit.repeat(65536 / unit.len().max(1));
    let per_chunk = 65536 / unit.len().max(1);
    let mut left = times;
    while left > 0 {
        let n = left.min(per_chunk);
        gz.write_all(&chunk[..n * unit.len()]).unwrap();
        left -= n;
    }
    gz.write_all(suffix).unwrap();
    gz.finish().unwrap()
}

/// Reads a gzip stream as `cachalot` reads a file; the error (if any) and the peak.
fn read_gz(gz: &[u8]) -> (Result<usize, String>, usize) {
    peak(|| {
        read_snapshot_from(BufReader::new(GzDecoder::new(gz)))
            .map(|s| kept(&s))
            .map_err(|e| e.to_string())
    })
}

const MIB: usize = 1 << 20;

#[test]
fn the_reader_holds_a_small_multiple_of_what_it_keeps() {
    // Real snapshots: torch's pickles (no stack context) and users' JSON with stack frames.
    let dir = common::fixtures();
    let mut files: Vec<_> = ["pickle", "snapshots"]
        .iter()
        .flat_map(|d| std::fs::read_dir(dir.join(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gz"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    for path in &files {
        let data = common::read(path);
        let (snap, p) = peak(|| read_snapshot(&data).unwrap());
        let k = kept(&snap);
        println!(
            "{}: {} bytes in, {k} kept, peak {p} ({:.2}x kept)",
            path.display(),
            data.len(),
            p as f64 / k as f64
        );
        assert!(
            p <= 2 * k + 2 * MIB,
            "{}: peak {p}, kept {k}",
            path.display()
        );
    }

    let limit = 2 * (WORK_BASE + 8 * MIB);
    // A memo bomb: None, MEMOIZE, POP, 256 MiB of it (89 M memo entries).
    let (r, p) = read_gz(&gzip(b"\x80\x04", b"N\x940", 89 << 20, b"."));
    let e = r.unwrap_err();
    assert!(e.contains("working memory"), "{e}");
    assert!(p <= limit, "memo bomb: peak {p}");
    println!("memo bomb: peak {p}: {e}");
    // The 4 MiB of Nones, and 256 MiB of them.
    for n in [4 << 20, 256 << 20] {
        let (r, p) = read_gz(&gzip(b"\x80\x04", b"N", n, b"."));
        assert!(r.is_err());
        assert!(p <= limit, "{n} Nones: peak {p}");
        println!("{n} Nones: peak {p}");
    }
    // Distinct strings, memoized and dropped: 8 M of them.
    let mut strings = b"\x80\x04".to_vec();
    for i in 0..(8u32 << 20) {
        strings.extend(b"\x8c\x08");
        strings.extend(format!("{i:08x}").as_bytes());
        strings.extend(b"\x940");
    }
    strings.push(b'.');
    let (r, p) = read_gz(&gzip(&strings, b"", 0, b""));
    assert!(r.unwrap_err().contains("working memory"));
    assert!(p <= limit, "strings: peak {p}");
    // 64 M junk elements in a list under a key nothing reads, and 64 M Nones as history
    // entries: read to the end, held nowhere.
    let batch = [&b"("[..], &b"N".repeat(1000), b"e"].concat();
    for prefix in [
        &b"\x80\x04}\x8c\x04junk]"[..],
        b"\x80\x04}(\x8c\x08segments]\x8c\rdevice_traces]]",
    ] {
        let suffix: &[u8] = if prefix.ends_with(b"]]") {
            b"au."
        } else {
            b"s."
        };
        let (r, p) = read_gz(&gzip(prefix, &batch, 64 << 10, suffix));
        let e = r.unwrap_err();
        assert!(
            e.contains("missing key 'segments'") || e.contains("expected a dict, found None"),
            "{e}"
        );
        assert!(p <= 4 * MIB, "junk: peak {p}: {e}");
        println!("64 M junk elements: peak {p}: {e}");
    }
    // A big valid history keeps what it decodes and little more.
    let mut snap = read_snapshot(&common::read(
        &dir.join("pickle/resnet50-train.oom-5G.pickle.gz"),
    ))
    .unwrap();
    let entries = snap.device_traces[0].entries.clone();
    for _ in 0..30 {
        snap.device_traces[0].entries.extend_from_slice(&entries);
    }
    let bytes = cachalot_torchfmt::to_pickle_bytes(&snap);
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&bytes).unwrap();
    let gz = gz.finish().unwrap();
    drop(bytes);
    let (r, p) = read_gz(&gz);
    let k = r.unwrap();
    println!(
        "{} entries: kept {k}, peak {p}",
        snap.device_traces[0].entries.len()
    );
    assert!(p <= 2 * k + 2 * MIB, "peak {p}, kept {k}");
}
