//! Parse-speed check: `cargo run --release --example rmm_bench -- FILE [REPS]`.
//!
//! Reports the best of REPS (default 10) runs for: gzip decompression alone,
//! parsing the decompressed text from memory, and `open` + parse end to end.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use cachalot_trace::{RmmReader, open_decompressed};

fn best<T>(reps: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..reps {
        let t = Instant::now();
        out = Some(f());
        best = best.min(t.elapsed());
    }
    (best, out.unwrap())
}

fn count<R: std::io::BufRead>(r: RmmReader<R>) -> usize {
    let mut n = 0;
    for e in r {
        e.expect("trace error");
        n += 1;
    }
    n
}

fn main() {
    let mut args = std::env::args().skip(1);
    let file = args.next().expect("FILE");
    let reps: usize = args.next().map_or(10, |s| s.parse().expect("REPS"));
    let path = Path::new(&file);
    let (t_dec, text) = best(reps, || {
        let mut v = Vec::new();
        open_decompressed(path)
            .unwrap()
            .read_to_end(&mut v)
            .unwrap();
        v
    });
    let (t_parse, n) = best(reps, || count(RmmReader::new(&text[..])));
    let (t_all, _) = best(reps, || count(cachalot_trace::open(path).unwrap()));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{file}: {n} events, {} bytes\n  read+decompress: {:.2} ms\n  parse (in memory): {:.2} ms ({:.1} M lines/s, {:.0} MB/s)\n  open+decompress+parse: {:.2} ms",
        text.len(),
        ms(t_dec),
        ms(t_parse),
        n as f64 / t_parse.as_secs_f64() / 1e6,
        text.len() as f64 / t_parse.as_secs_f64() / 1e6,
        ms(t_all)
    );
}
