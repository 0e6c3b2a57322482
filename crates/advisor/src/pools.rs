//! Each pool's share of the peaks, and what `empty_cache` can give back, for the advisor's
//! reports: only for traces that use private pools (`MemPool`, CUDA graphs); the reports of
//! other traces are unchanged. The numbers are `cachalot_replay::pool_account`'s, from a
//! replay of one configuration at one capacity.

use cachalot_core::AllocConf;
use cachalot_replay::pool_account::{PoolPeaks, pool_peaks, replay_with_pools};

use crate::{AdvisorError, Workload};

/// Whether any part of the workload names a private pool.
pub fn uses_pools(w: &dyn Workload) -> bool {
    w.parts().iter().any(|t| !t.pools.is_empty())
}

/// The pool accounts of part `part` of the workload replayed under `conf` at `capacity`;
/// `None` when that part names no pool (or the backend keeps none). A replay stopped by a
/// fatal error reports the accounts up to it.
pub fn pool_peaks_of(
    w: &dyn Workload,
    conf: &AllocConf,
    capacity: u64,
    part: usize,
) -> Result<Option<PoolPeaks>, AdvisorError> {
    let Some(trace) = w.parts().get(part) else {
        return Ok(None);
    };
    if trace.pools.is_empty() {
        return Ok(None);
    }
    let opts = crate::measure::options(conf, capacity);
    match replay_with_pools(trace, &opts) {
        Ok((_, p)) => Ok(p),
        Err(mut e) => match e.report.take() {
            Some(r) => {
                let opts = cachalot_replay::ReplayOptions {
                    pool_peaks: true,
                    ..opts
                };
                Ok(pool_peaks(trace, &opts, &r)?)
            }
            None => Err(e.into()),
        },
    }
}
