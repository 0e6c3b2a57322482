//! Random traces that mix allocations with the private-pool rows, `empty_cache` and
//! `record_stream` (the oracle comparison and the pool-account tests replay them).

use std::fmt::Write as _;

use cachalot_trace::SplitMix64 as Rng;

/// A random trace mixing allocations on `streams` streams with the private-pool rows,
/// `empty_cache` (whole cache or one pool) and `record_stream`. Pools are used as torch allows
/// (a released pool's id is never begun again), except that with `misuse` the trace ends with
/// one row torch rejects.
pub fn random_pool_trace(seed: u64, events: usize, streams: u64, misuse: bool) -> String {
    #[derive(Clone, Copy)]
    struct Pool {
        id: u64,
        graph: bool,
        refs: u32,
        open: bool,
    }
    let mut rng = Rng::new(seed);
    let mut live: Vec<u64> = Vec::new();
    let mut pools: Vec<Pool> = Vec::new();
    let mut next_ptr = 1u64;
    let mut next_pool = 1u64;
    let mut out = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let row = |out: &mut String, action: &str, ptr: String, size: u64, stream: String| {
        writeln!(out, "1,0,{action},{ptr},{size},{stream}").unwrap();
    };
    for _ in 0..events {
        let usable: Vec<usize> = (0..pools.len()).filter(|&i| pools[i].refs > 0).collect();
        match rng.below(100) {
            0..=44 if live.len() < 150 || live.is_empty() => {
                let size = match rng.below(10) {
                    0..=5 => rng.log_uniform(1, 1 << 20),
                    6..=8 => rng.log_uniform(1 << 20, 10 << 20),
                    _ => rng.log_uniform(10 << 20, 120 << 20),
                };
                let stream = rng.below(streams);
                row(
                    &mut out,
                    "allocate",
                    format!("{next_ptr:#x}"),
                    size,
                    stream.to_string(),
                );
                live.push(next_ptr);
                next_ptr += 1;
            }
            0..=79 if !live.is_empty() => {
                let p = live.swap_remove(rng.below(live.len() as u64) as usize);
                row(&mut out, "free", format!("{p:#x}"), 0, "0".into());
            }
            80..=85 => {
                // Begin a pool: a new one, or one still referenced and not open.
                let closed: Vec<usize> =
                    usable.iter().copied().filter(|&i| !pools[i].open).collect();
                let i = if closed.is_empty() || rng.below(3) == 0 {
                    pools.push(Pool {
                        id: next_pool,
                        graph: rng.below(3) == 0,
                        refs: 0,
                        open: false,
                    });
                    next_pool += 1;
                    pools.len() - 1
                } else {
                    closed[rng.below(closed.len() as u64) as usize]
                };
                let filter = if rng.below(2) == 0 {
                    "*".into()
                } else {
                    rng.below(streams).to_string()
                };
                let p = &mut pools[i];
                let action = if p.graph { "graph_begin" } else { "pool_begin" };
                // pool_begin of a pool torch does not have also makes it (one reference more).
                p.refs += if !p.graph && p.refs == 0 { 2 } else { 1 };
                p.open = true;
                row(&mut out, action, p.id.to_string(), 0, filter);
            }
            86..=90 => {
                let open: Vec<usize> = (0..pools.len()).filter(|&i| pools[i].open).collect();
                if let Some(&i) = open.get(rng.below(open.len().max(1) as u64) as usize) {
                    let p = &mut pools[i];
                    p.open = false;
                    let action = if p.graph {
                        "graph_end"
                    } else {
                        p.refs -= 1;
                        "pool_end"
                    };
                    row(&mut out, action, p.id.to_string(), 0, "0".into());
                }
            }
            91..=93 => {
                let held: Vec<usize> = usable
                    .iter()
                    .copied()
                    .filter(|&i| pools[i].refs > u32::from(pools[i].open))
                    .collect();
                if let Some(&i) = held.get(rng.below(held.len().max(1) as u64) as usize) {
                    pools[i].refs -= 1;
                    row(
                        &mut out,
                        "pool_release",
                        pools[i].id.to_string(),
                        0,
                        "0".into(),
                    );
                }
            }
            94..=96 => {
                let target = if pools.is_empty() || rng.below(2) == 0 {
                    0
                } else {
                    pools[rng.below(pools.len() as u64) as usize].id
                };
                row(&mut out, "empty_cache", target.to_string(), 0, "0".into());
            }
            _ if !live.is_empty() => {
                let p = live[rng.below(live.len() as u64) as usize];
                row(
                    &mut out,
                    "record_stream",
                    format!("{p:#x}"),
                    0,
                    rng.below(streams).to_string(),
                );
            }
            _ => {}
        }
    }
    if misuse {
        match rng.below(3) {
            0 => row(&mut out, "pool_end", next_pool.to_string(), 0, "0".into()),
            1 => row(
                &mut out,
                "pool_release",
                next_pool.to_string(),
                0,
                "0".into(),
            ),
            _ => row(&mut out, "graph_end", next_pool.to_string(), 0, "0".into()),
        }
    }
    out
}
