//! The simulated device's stream-ordered pool (`cudaMallocAsync` / `cudaFreeAsync`), modelled
//! exactly as the fidelity oracle's fake CUDA runtime models it.
//!
//! The model:
//! - `cudaMallocAsync` takes its address and its charge from the same range and the same
//!   counter as `cudaMalloc` (lowest-address first fit; 512 B alignment and charge granularity
//!   below 2 MiB, 2 MiB above); the stream does not matter;
//! - streams complete at once, so a `cudaFreeAsync` returns the memory at once, whatever the
//!   streams it must wait for;
//! - the pool keeps nothing cached: its reserved memory *is* its used memory, both counted at
//!   the charged (rounded) size. `ReservedMemHigh` and `UsedMemHigh` are one high-water mark,
//!   which resetting sets to the current value; trimming has nothing to release.
//!
//! A real driver differs in one visible way: with torch's release threshold (the maximum),
//! freed memory stays reserved by the pool until it is trimmed, so `reserved_bytes` on a GPU is
//! at least `allocated_bytes`, and `empty_cache()` lowers it. Addresses, too, are the driver's.
//!
//! Misuse is an invalid-value error, logged as a failed call: freeing an address the pool did
//! not hand out (including a `cudaMalloc` address), or `cudaFree` of a pool address.

use std::collections::HashMap;

use cachalot_device::{DeviceResult, PoolUsage};

use crate::{Op, SimDevice, invalid};

/// The pool's books.
#[derive(Debug, Default)]
pub(crate) struct AsyncPool {
    /// Live pool allocations: address → (requested size, charge).
    live: HashMap<u64, (u64, u64)>,
    /// Charged bytes of live pool allocations.
    used: u64,
    /// High-water mark of `used` since the last reset.
    high: u64,
}

impl SimDevice {
    pub(crate) fn pool_malloc(&mut self, size: u64) -> DeviceResult<u64> {
        if size == 0 {
            return Ok(0);
        }
        let (ptr, charge) = self.place(size, Op::CudaMallocAsync)?;
        self.pool.live.insert(ptr, (size, charge));
        self.pool.used += charge;
        self.pool.high = self.pool.high.max(self.pool.used);
        self.counters.cuda_malloc_async += 1;
        self.push(Op::CudaMallocAsync, size, ptr, 0, 0);
        Ok(ptr)
    }

    pub(crate) fn pool_free(&mut self, ptr: u64) -> DeviceResult<()> {
        if ptr == 0 {
            return Ok(());
        }
        let Some((size, charge)) = self.pool.live.remove(&ptr) else {
            self.push(Op::CudaFreeAsync, 0, ptr, 0, 1);
            return Err(invalid(
                "cudaFreeAsync",
                format!("{ptr:#x} is not a live pool allocation"),
            ));
        };
        self.unplace(ptr, charge);
        self.pool.used -= charge;
        self.counters.cuda_free_async += 1;
        self.push(Op::CudaFreeAsync, size, ptr, 0, 0);
        Ok(())
    }

    pub(crate) fn pool_usage_now(&self) -> PoolUsage {
        PoolUsage {
            reserved_current: self.pool.used,
            reserved_high: self.pool.high,
            used_current: self.pool.used,
            used_high: self.pool.high,
        }
    }

    pub(crate) fn pool_reset_peaks(&mut self) {
        self.pool.high = self.pool.used;
    }

    /// Bytes charged by live `cudaMallocAsync` allocations.
    pub fn pool_used(&self) -> u64 {
        self.pool.used
    }
}

#[cfg(test)]
mod tests {
    use cachalot_device::{Device, DeviceError, StreamId};

    use crate::{Op, SimConfig, SimDevice};

    const MIB: u64 = 1 << 20;
    const BASE: u64 = 0x1000_0000_0000;

    #[test]
    fn pool_shares_the_cudamalloc_address_policy() {
        let mut d = SimDevice::new(SimConfig::default());
        d.enable_log();
        let a = d.malloc_async(1, StreamId(7)).unwrap();
        let b = d.malloc_async(1000, StreamId::DEFAULT).unwrap();
        let c = d.malloc(3 * MIB).unwrap();
        assert_eq!((a, b, c), (BASE, BASE + 0x200, BASE + 2 * MIB));
        assert_eq!(d.pool_used(), 512 + 1024);
        d.free_async(a, 1, StreamId(7), &[StreamId(9)]).unwrap();
        // First fit reuses the hole at once: streams complete immediately.
        assert_eq!(d.malloc_async(100, StreamId(3)).unwrap(), BASE);
        let ops: Vec<Op> = d.log().iter().map(|e| e.op).collect();
        assert_eq!(
            ops,
            [
                Op::CudaMallocAsync,
                Op::CudaMallocAsync,
                Op::CudaMalloc,
                Op::CudaFreeAsync,
                Op::CudaMallocAsync
            ]
        );
        assert_eq!(d.log()[3].size, 1, "a free logs the requested size");
        assert_eq!(d.counters().cuda_malloc_async, 3);
        assert_eq!(d.counters().cuda_free_async, 1);
        assert_eq!(d.phys_used(), 512 + 1024 + 4 * MIB);
    }

    #[test]
    fn pool_usage_and_peaks() {
        let mut d = SimDevice::new(SimConfig::default());
        let a = d.malloc_async(5 * MIB, StreamId::DEFAULT).unwrap();
        let b = d.malloc_async(MIB, StreamId::DEFAULT).unwrap();
        d.free_async(a, 5 * MIB, StreamId::DEFAULT, &[]).unwrap();
        let u = d.pool_usage().unwrap();
        assert_eq!(u.used_current, MIB);
        assert_eq!(u.reserved_current, MIB);
        assert_eq!(u.used_high, 7 * MIB);
        assert_eq!(u.reserved_high, 7 * MIB);
        d.reset_pool_peaks().unwrap();
        assert_eq!(d.pool_usage().unwrap().used_high, MIB);
        d.trim(0).unwrap();
        d.free_async(b, MIB, StreamId::DEFAULT, &[]).unwrap();
        assert_eq!(d.pool_usage().unwrap().used_current, 0);
        assert_eq!(d.phys_used(), 0);
    }

    #[test]
    fn pool_out_of_memory_and_misuse() {
        let mut d = SimDevice::new(SimConfig::with_capacity(64 * MIB));
        d.enable_log();
        let a = d.malloc_async(60 * MIB, StreamId::DEFAULT).unwrap();
        assert_eq!(
            d.malloc_async(8 * MIB, StreamId::DEFAULT),
            Err(DeviceError::OutOfMemory)
        );
        assert_eq!(d.counters().cuda_malloc_failed, 1);
        let last = *d.log().last().unwrap();
        assert_eq!(
            (last.op, last.ptr, last.result),
            (Op::CudaMallocAsync, 0, 2)
        );
        // A pool address is not a cudaMalloc address, and the other way round.
        assert!(matches!(
            d.free(a, 60 * MIB),
            Err(DeviceError::Driver { .. })
        ));
        let err = d
            .free_async(a + 512, 1, StreamId::DEFAULT, &[])
            .unwrap_err();
        assert!(err.to_string().contains("cudaFreeAsync"), "{err}");
        let last = *d.log().last().unwrap();
        assert_eq!((last.op, last.size, last.result), (Op::CudaFreeAsync, 0, 1));
        d.free_async(a, 60 * MIB, StreamId::DEFAULT, &[]).unwrap();
        assert_eq!(d.malloc_async(0, StreamId::DEFAULT), Ok(0));
    }
}
