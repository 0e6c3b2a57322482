//! `CACHALOT_DEVICE_LOG=FILE`: every device memory call of every device the library opens,
//! real or simulated, one CSV row each in the capture runtime's `FAKE_CUDA_LOG` format
//! (`seq,op,size,ptr,handle,result,phys_used`: the oracle's `--segments` log less its
//! `trace_line` column, the op names of `cachalot_sim::Op`), so that cachalot's CUDA device and
//! its simulated device can be compared call for call on one workload
//! (`tests/python/test_torch.py`).
//!
//! The log is one [`Logged`] wrapper around any [`Device`]: it knows nothing of what is
//! underneath. `phys_used` is the device's own `total - free` after the call
//! (`mem_get_info`), which on the simulated device and on the simulated driver is the memory
//! charged; on a real GPU it is the memory in use on the whole device. `result` is 0 for
//! success, 2 for out of memory and 1 for any other error (the simulated device's codes).
//!
//! The file must not exist (it is created with `O_EXCL`, so an existing file, a symlink, a
//! FIFO or a device is never written over); rows are written as they happen (unbuffered), so
//! a process that is killed leaves every call before it. A write that fails is reported once
//! and ends the log; the device calls go on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Arc, Mutex};

use cachalot::{Device, DeviceError, DeviceResult, MemInfo, StreamId};
use cachalot_device::{EventId, MemHandle, PoolUsage};
use cachalot_sim::Op;

/// The open log file and the number of rows written, shared by every device.
pub struct CallLog {
    out: Mutex<Option<(File, u64)>>,
    path: String,
}

impl CallLog {
    /// Creates `path` (which must not exist) and writes the header.
    pub fn create(path: &str) -> Result<Arc<CallLog>, String> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| {
                format!(
                    "CACHALOT_DEVICE_LOG={path}: cannot create it ({e}); name a file that does \
                     not exist yet, in a folder that does"
                )
            })?;
        file.write_all(b"seq,op,size,ptr,handle,result,phys_used\n")
            .map_err(|e| format!("CACHALOT_DEVICE_LOG={path}: cannot write to it ({e})"))?;
        Ok(Arc::new(CallLog {
            out: Mutex::new(Some((file, 0))),
            path: path.to_string(),
        }))
    }

    fn write(&self, op: Op, size: u64, ptr: u64, handle: u64, result: u32, phys_used: u64) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let Some((file, seq)) = out.as_mut() else {
            return;
        };
        *seq += 1;
        let row = format!(
            "{seq},{},{size},{ptr:#x},{handle},{result},{phys_used}\n",
            op.name()
        );
        if let Err(e) = file.write_all(row.as_bytes()) {
            crate::report::report(&format!(
                "CACHALOT_DEVICE_LOG={}: writing failed ({e}); the log ends at row {}",
                self.path,
                *seq - 1
            ));
            *out = None;
        }
    }
}

/// A device whose memory calls are written to a [`CallLog`].
pub struct Logged {
    inner: Box<dyn Device>,
    log: Arc<CallLog>,
}

impl Logged {
    /// `inner`, logging into `log`.
    pub fn new(inner: Box<dyn Device>, log: Arc<CallLog>) -> Logged {
        Logged { inner, log }
    }

    /// Writes one row for a call that returned `r`: on success the call's own size, address
    /// and handle; a failed free or release logs size 0 and a failed allocation address 0, as
    /// the simulated device and the simulated driver do.
    fn row<T>(&mut self, op: Op, size: u64, ptr: u64, handle: u64, r: &DeviceResult<T>) {
        let result = match r {
            Ok(_) => 0,
            Err(DeviceError::OutOfMemory) => 2,
            Err(_) => 1,
        };
        let size = if result != 0 && matches!(op, Op::CudaFree | Op::CudaFreeAsync) {
            0
        } else {
            size
        };
        let used = match self.inner.mem_get_info() {
            Ok(MemInfo { free, total }) => total.saturating_sub(free),
            Err(_) => 0,
        };
        self.log.write(op, size, ptr, handle, result, used);
    }
}

impl Device for Logged {
    fn malloc(&mut self, size: u64) -> DeviceResult<u64> {
        let r = self.inner.malloc(size);
        self.row(Op::CudaMalloc, size, *r.as_ref().unwrap_or(&0), 0, &r);
        r
    }

    fn free(&mut self, ptr: u64, size: u64) -> DeviceResult<()> {
        let r = self.inner.free(ptr, size);
        self.row(Op::CudaFree, size, ptr, 0, &r);
        r
    }

    fn mem_get_info(&mut self) -> DeviceResult<MemInfo> {
        self.inner.mem_get_info()
    }

    fn record_event(&mut self, stream: StreamId) -> DeviceResult<EventId> {
        self.inner.record_event(stream)
    }

    fn query_event(&mut self, event: EventId) -> DeviceResult<bool> {
        self.inner.query_event(event)
    }

    fn synchronize_event(&mut self, event: EventId) -> DeviceResult<()> {
        self.inner.synchronize_event(event)
    }

    fn synchronize_stream(&mut self, stream: StreamId) -> DeviceResult<()> {
        self.inner.synchronize_stream(stream)
    }

    fn supports_vmm(&self) -> bool {
        self.inner.supports_vmm()
    }

    fn granularity(&self) -> u64 {
        self.inner.granularity()
    }

    fn address_reserve(&mut self, size: u64) -> DeviceResult<u64> {
        let r = self.inner.address_reserve(size);
        self.row(Op::AddressReserve, size, *r.as_ref().unwrap_or(&0), 0, &r);
        r
    }

    fn address_free(&mut self, ptr: u64, size: u64) -> DeviceResult<()> {
        let r = self.inner.address_free(ptr, size);
        self.row(Op::AddressFree, size, ptr, 0, &r);
        r
    }

    fn mem_create(&mut self, size: u64) -> DeviceResult<MemHandle> {
        let r = self.inner.mem_create(size);
        let handle = r.as_ref().map_or(0, |h| h.0);
        self.row(Op::MemCreate, size, 0, handle, &r);
        r
    }

    fn mem_release(&mut self, handle: MemHandle, size: u64) -> DeviceResult<()> {
        let r = self.inner.mem_release(handle, size);
        self.row(Op::MemRelease, size, 0, handle.0, &r);
        r
    }

    fn mem_map(&mut self, ptr: u64, size: u64, handle: MemHandle) -> DeviceResult<()> {
        let r = self.inner.mem_map(ptr, size, handle);
        self.row(Op::MemMap, size, ptr, handle.0, &r);
        r
    }

    fn mem_unmap(&mut self, ptr: u64, size: u64, handle: MemHandle) -> DeviceResult<()> {
        let r = self.inner.mem_unmap(ptr, size, handle);
        self.row(Op::MemUnmap, size, ptr, handle.0, &r);
        r
    }

    fn malloc_async(&mut self, size: u64, stream: StreamId) -> DeviceResult<u64> {
        let r = self.inner.malloc_async(size, stream);
        self.row(Op::CudaMallocAsync, size, *r.as_ref().unwrap_or(&0), 0, &r);
        r
    }

    fn free_async(
        &mut self,
        ptr: u64,
        size: u64,
        stream: StreamId,
        also_used_on: &[StreamId],
    ) -> DeviceResult<()> {
        let r = self.inner.free_async(ptr, size, stream, also_used_on);
        self.row(Op::CudaFreeAsync, size, ptr, 0, &r);
        r
    }

    fn trim(&mut self, keep: u64) -> DeviceResult<()> {
        self.inner.trim(keep)
    }

    fn pool_usage(&mut self) -> DeviceResult<PoolUsage> {
        self.inner.pool_usage()
    }

    fn reset_pool_peaks(&mut self) -> DeviceResult<()> {
        self.inner.reset_pool_peaks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot::{SimConfig, SimDevice};

    #[test]
    fn each_memory_call_is_one_row_in_the_runtimes_format() {
        let dir = std::env::temp_dir().join(format!("cachalot-device-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("calls.csv");
        let _ = std::fs::remove_file(&path);
        let log = CallLog::create(path.to_str().unwrap()).unwrap();
        let sim = SimDevice::new(SimConfig::with_capacity(64 << 20));
        let mut d = Logged::new(Box::new(sim), log.clone());
        let a = d.malloc(3 << 20).unwrap();
        assert_eq!(d.malloc(100 << 20), Err(DeviceError::OutOfMemory));
        d.free(a, 3 << 20).unwrap();
        assert!(d.free(a, 3 << 20).is_err());
        let va = d.address_reserve(8 << 20).unwrap();
        let h = d.mem_create(2 << 20).unwrap();
        d.mem_map(va, 2 << 20, h).unwrap();
        d.mem_unmap(va, 2 << 20, h).unwrap();
        d.mem_release(h, 2 << 20).unwrap();
        d.address_free(va, 8 << 20).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[0], "seq,op,size,ptr,handle,result,phys_used");
        assert_eq!(
            rows[1..],
            [
                "1,cudaMalloc,3145728,0x100000000000,0,0,4194304",
                "2,cudaMalloc,104857600,0x0,0,2,4194304",
                "3,cudaFree,3145728,0x100000000000,0,0,0",
                "4,cudaFree,0,0x100000000000,0,1,0",
                "5,cuMemAddressReserve,8388608,0x200000000000,0,0,0",
                "6,cuMemCreate,2097152,0x0,1,0,2097152",
                "7,cuMemMap,2097152,0x200000000000,1,0,2097152",
                "8,cuMemUnmap,2097152,0x200000000000,1,0,2097152",
                "9,cuMemRelease,2097152,0x0,1,0,0",
                "10,cuMemAddressFree,8388608,0x200000000000,0,0,0",
            ]
        );
        // A file that exists already is never written over.
        let again = CallLog::create(path.to_str().unwrap()).err().unwrap();
        assert!(
            again.contains("name a file that does not exist yet"),
            "{again}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
