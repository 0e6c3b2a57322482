//! A simulated GPU that hands out addresses exactly as the fidelity oracle's fake CUDA runtime
//! does, so a replay through cachalot and through torch's own allocator produce the same
//! device calls at the same addresses.
//!
//! The policy (from the oracle's README, "The simulated device"):
//! - one capacity counter; `cudaMalloc` charges `round_up(size, 512)` below 2 MiB and
//!   `round_up(size, 2 MiB)` above, `cuMemCreate` charges its size until the handle is both
//!   released and unmapped; a call fails if the charge would exceed the capacity;
//! - `cudaMalloc` addresses come from `[B, B + R)`, `B = 0x100000000000`,
//!   `R = round_up(max(8 × capacity, 64 GiB), 2 MiB)`, lowest-address first fit with 512 B
//!   alignment below 2 MiB and 2 MiB alignment above, coalescing on free;
//! - virtual-memory reservations come from `[RB, RB + 32 TiB)`,
//!   `RB = max(0x200000000000, round_up(B + R, 1 TiB))`, same first fit, 2 MiB aligned;
//!   physical handles are numbered 1, 2, 3, … and never reused;
//! - streams and events complete at once;
//! - `cudaMallocAsync` shares the `cudaMalloc` range and policy; its pool caches nothing
//!   (the model is described in the `async_pool` module).
//!
//! Every device call can be logged ([`SimDevice::log`]) in the oracle's `--segments` format.

#![forbid(unsafe_code)]

mod async_pool;
mod ranges;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use cachalot_device::{
    Device, DeviceError, DeviceResult, EventId, MemHandle, MemInfo, PoolUsage, StreamId,
};

use async_pool::AsyncPool;
use ranges::FreeRanges;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// The simulated device's settings (the oracle's `FAKE_CUDA_*` variables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Device memory in bytes (`FAKE_CUDA_CAPACITY`, default 80 GiB).
    pub capacity: u64,
    /// Bytes charged from the start, a pretend CUDA context (`FAKE_CUDA_RESERVED`).
    pub reserved: u64,
    /// Start of the `cudaMalloc` range (`FAKE_CUDA_VA_BASE`), rounded up to 2 MiB.
    pub va_base: u64,
    /// Whether VMM calls (expandable segments) are available.
    pub vmm: bool,
    /// How many times an event must be queried before it reports completion (0 = at once, as
    /// the oracle's device). A virtual clock for testing frees that wait on other streams.
    pub event_delay: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            capacity: 80 * GIB,
            reserved: 0,
            va_base: 0x1000_0000_0000,
            vmm: true,
            event_delay: 0,
        }
    }
}

impl SimConfig {
    /// The default device with `capacity` bytes.
    pub fn with_capacity(capacity: u64) -> Self {
        SimConfig {
            capacity,
            ..SimConfig::default()
        }
    }

    /// Device `index` of a machine of simulated devices of `capacity` bytes each, laid out so
    /// that an address names one device, as CUDA's unified addressing does: device 0 where the
    /// oracle's fake puts memory, every next one 64 TiB further or, when the one before spans
    /// more, just above all of its address ranges. `None` when device `index` no longer fits
    /// below 2^64 (capacities from 2^60 bytes, where `8 × capacity` of address space is asked
    /// for).
    pub fn device_of_many(index: usize, capacity: u64) -> Option<SimConfig> {
        const STRIDE: u64 = 64 * TIB;
        let first = SimConfig::with_capacity(capacity);
        let mut config = first.clone();
        for i in 0..=index {
            let (base, _, vmm_base, vmm_range) = address_layout(&config);
            if base != config.va_base {
                // The layout was pulled down below the end of the device before.
                return None;
            }
            if i == index {
                return Some(config);
            }
            let spaced = STRIDE
                .checked_mul(i as u64 + 1)?
                .checked_add(first.va_base)?;
            let above = round_up(vmm_base + vmm_range, 2 * MIB)?;
            config.va_base = spaced.max(above);
        }
        None
    }

    /// The address ranges device memory of these settings can come from, `cudaMalloc`'s and
    /// the virtual-memory one, as `[start, end)`; they do not overlap and end below 2^64.
    pub fn address_ranges(&self) -> [(u64, u64); 2] {
        let (base, range, vmm_base, vmm_range) = address_layout(self);
        [(base, base + range), (vmm_base, vmm_base + vmm_range)]
    }
}

/// Which device call a [`LogEntry`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `cudaMalloc`.
    CudaMalloc,
    /// `cudaFree`.
    CudaFree,
    /// `cudaMallocAsync`.
    CudaMallocAsync,
    /// `cudaFreeAsync`.
    CudaFreeAsync,
    /// `cuMemAddressReserve`.
    AddressReserve,
    /// `cuMemAddressFree`.
    AddressFree,
    /// `cuMemCreate`.
    MemCreate,
    /// `cuMemRelease`.
    MemRelease,
    /// `cuMemMap`.
    MemMap,
    /// `cuMemUnmap`.
    MemUnmap,
}

impl Op {
    /// The call's name as the oracle's log writes it.
    pub fn name(self) -> &'static str {
        match self {
            Op::CudaMalloc => "cudaMalloc",
            Op::CudaFree => "cudaFree",
            Op::CudaMallocAsync => "cudaMallocAsync",
            Op::CudaFreeAsync => "cudaFreeAsync",
            Op::AddressReserve => "cuMemAddressReserve",
            Op::AddressFree => "cuMemAddressFree",
            Op::MemCreate => "cuMemCreate",
            Op::MemRelease => "cuMemRelease",
            Op::MemMap => "cuMemMap",
            Op::MemUnmap => "cuMemUnmap",
        }
    }
}

/// One logged device call (a row of the oracle's `--segments` CSV).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// 1, 2, 3, …
    pub seq: u64,
    /// The caller's tag when the call happened (the replay sets it to the trace line).
    pub tag: i64,
    /// The call.
    pub op: Op,
    /// Bytes asked for, freed, reserved, created or mapped.
    pub size: u64,
    /// Address (0 for a failed allocation, `cuMemCreate` and `cuMemRelease`).
    pub ptr: u64,
    /// Physical handle id for VMM calls, else 0.
    pub handle: u64,
    /// 0 = success, 2 = out of memory, 1 = invalid value.
    pub result: u32,
    /// Charged bytes after the call.
    pub phys_used: u64,
}

/// Counters of successful and failed calls (the oracle's `fake_device` object).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimCounters {
    /// Successful `cudaMalloc`s.
    pub cuda_malloc: u64,
    /// Successful `cudaFree`s.
    pub cuda_free: u64,
    /// Failed `cudaMalloc` and `cudaMallocAsync` calls.
    pub cuda_malloc_failed: u64,
    /// Successful `cudaMallocAsync`s.
    pub cuda_malloc_async: u64,
    /// Successful `cudaFreeAsync`s.
    pub cuda_free_async: u64,
    /// Successful `cuMemCreate`s.
    pub mem_create: u64,
    /// Failed `cuMemCreate`s.
    pub mem_create_failed: u64,
    /// Successful `cuMemRelease`s.
    pub mem_release: u64,
    /// Successful `cuMemMap`s.
    pub mem_map: u64,
    /// Mappings unmapped.
    pub mem_unmap: u64,
    /// `cuMemAddressReserve`s.
    pub address_reserve: u64,
    /// `cuMemAddressFree`s.
    pub address_free: u64,
    /// Highest charge seen.
    pub phys_peak: u64,
}

#[derive(Clone, Copy, Debug)]
struct Handle {
    size: u64,
    mapped: bool,
    released: bool,
}

/// The simulated device.
#[derive(Debug)]
pub struct SimDevice {
    config: SimConfig,
    phys_used: u64,
    malloc_ranges: FreeRanges,
    /// Live `cudaMalloc`s: address → (requested size, charge).
    live: HashMap<u64, (u64, u64)>,
    vmm_ranges: FreeRanges,
    reservations: HashMap<u64, u64>,
    handles: HashMap<u64, Handle>,
    mappings: HashMap<u64, u64>,
    next_handle: u64,
    next_event: u64,
    /// Queries left before each pending event completes.
    pending_events: HashMap<u64, u32>,
    counters: SimCounters,
    log: Option<Vec<LogEntry>>,
    tag: Arc<AtomicI64>,
    /// The stream-ordered pool (`cudaMallocAsync`).
    pool: AsyncPool,
}

/// `x` rounded up to a multiple of `m`; `None` past `u64::MAX`.
fn round_up(x: u64, m: u64) -> Option<u64> {
    x.div_ceil(m).checked_mul(m)
}

/// The largest multiple of 2 MiB at most `x`.
fn round_down_2mib(x: u64) -> u64 {
    x & !(2 * MIB - 1)
}

/// The `cudaMalloc` range `[base, base + range)` and the VMM range, as the oracle's fake lays
/// them out, for any settings. The fake computes `8 × capacity` modulo 2^64 (so a device of
/// 2^61 bytes or more gets the 64 GiB minimum range); that is kept, on purpose, so addresses
/// match. Where an end would pass the top of the 64-bit space (bases near the top), the range
/// is cut there instead, so addresses never wrap around.
fn address_layout(config: &SimConfig) -> (u64, u64, u64, u64) {
    const VMM_LEN: u64 = 32 * TIB;
    let top = round_down_2mib(u64::MAX);
    // Leave room for the VMM range above the `cudaMalloc` one, whatever the settings.
    let base = round_up(config.va_base, 2 * MIB)
        .unwrap_or(top)
        .min(top - 2 * VMM_LEN - TIB);
    let wanted = config.capacity.wrapping_mul(8).max(64 * GIB);
    let range = round_down_2mib(
        round_up(wanted, 2 * MIB)
            .unwrap_or(top)
            .min(top - VMM_LEN - TIB - base),
    );
    let vmm_base = round_up(base + range, TIB)
        .unwrap_or(top)
        .max(0x2000_0000_0000)
        .min(top - VMM_LEN);
    (base, range, vmm_base, VMM_LEN)
}

impl SimDevice {
    /// A device with the given settings; nothing allocated, logging off.
    pub fn new(config: SimConfig) -> Self {
        let (base, range, vmm_base, vmm_range) = address_layout(&config);
        SimDevice {
            phys_used: config.reserved,
            malloc_ranges: FreeRanges::new(base, range),
            live: HashMap::new(),
            vmm_ranges: FreeRanges::new(vmm_base, vmm_range),
            reservations: HashMap::new(),
            handles: HashMap::new(),
            mappings: HashMap::new(),
            next_handle: 1,
            next_event: 1,
            pending_events: HashMap::new(),
            counters: SimCounters {
                phys_peak: config.reserved,
                ..SimCounters::default()
            },
            log: None,
            tag: Arc::new(AtomicI64::new(-1)),
            pool: AsyncPool::default(),
            config,
        }
    }

    /// Starts logging every device call.
    pub fn enable_log(&mut self) {
        self.log.get_or_insert_with(Vec::new);
    }

    /// The calls logged so far.
    pub fn log(&self) -> &[LogEntry] {
        self.log.as_deref().unwrap_or(&[])
    }

    /// Takes the calls logged so far, leaving the log empty (still on).
    pub fn take_log(&mut self) -> Vec<LogEntry> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// A shared cell whose value is written as the `tag` of each logged call; a replay sets it
    /// to the trace line being replayed.
    pub fn tag_handle(&self) -> Arc<AtomicI64> {
        self.tag.clone()
    }

    /// Bytes charged now.
    pub fn phys_used(&self) -> u64 {
        self.phys_used
    }

    /// Call counters.
    pub fn counters(&self) -> &SimCounters {
        &self.counters
    }

    /// The settings.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Bytes of address space currently reserved for VMM.
    pub fn va_reserved(&self) -> u64 {
        self.reservations.values().sum()
    }

    fn charge(&mut self, bytes: u64) -> bool {
        match self.phys_used.checked_add(bytes) {
            Some(used) if used <= self.config.capacity => self.phys_used = used,
            _ => return false,
        }
        self.counters.phys_peak = self.counters.phys_peak.max(self.phys_used);
        true
    }

    fn push(&mut self, op: Op, size: u64, ptr: u64, handle: u64, result: u32) {
        if let Some(log) = &mut self.log {
            log.push(LogEntry {
                seq: log.len() as u64 + 1,
                tag: self.tag.load(Ordering::Relaxed),
                op,
                size,
                ptr,
                handle,
                result,
                phys_used: self.phys_used,
            });
        }
    }

    fn maybe_uncharge(&mut self, id: u64) {
        if let Some(h) = self.handles.get(&id)
            && h.released
            && !h.mapped
        {
            let size = h.size;
            self.handles.remove(&id);
            self.phys_used -= size;
        }
    }
}

fn invalid(call: &'static str, what: String) -> DeviceError {
    DeviceError::Driver {
        call,
        message: format!("invalid value: {what}"),
    }
}

impl SimDevice {
    /// Charges and places `size` bytes in the `cudaMalloc` range (shared by `cudaMalloc` and
    /// `cudaMallocAsync`): 512 B alignment and charge below 2 MiB, 2 MiB above, first fit.
    /// A failure is counted and logged as `op`. Returns the address and the charge.
    pub(crate) fn place(&mut self, size: u64, op: Op) -> DeviceResult<(u64, u64)> {
        let align = if size < 2 * MIB { 512 } else { 2 * MIB };
        // A charge past `u64::MAX` cannot fit any device (the oracle's fake wraps it to 0 and
        // hands out an address twice).
        let charge = round_up(size, align);
        let placed = if let Some(charge) = charge
            && self.charge(charge)
        {
            let ptr = self.malloc_ranges.take(charge, align);
            if ptr.is_none() {
                self.phys_used -= charge;
            }
            ptr
        } else {
            None
        };
        match placed.zip(charge) {
            Some((ptr, charge)) => Ok((ptr, charge)),
            None => {
                self.counters.cuda_malloc_failed += 1;
                self.push(op, size, 0, 0, 2);
                Err(DeviceError::OutOfMemory)
            }
        }
    }

    /// Returns a placement made by [`SimDevice::place`].
    pub(crate) fn unplace(&mut self, ptr: u64, charge: u64) {
        self.malloc_ranges.give_back(ptr, charge);
        self.phys_used -= charge;
    }
}

impl Device for SimDevice {
    fn malloc(&mut self, size: u64) -> DeviceResult<u64> {
        if size == 0 {
            return Ok(0);
        }
        let (ptr, charge) = self.place(size, Op::CudaMalloc)?;
        self.live.insert(ptr, (size, charge));
        self.counters.cuda_malloc += 1;
        self.push(Op::CudaMalloc, size, ptr, 0, 0);
        Ok(ptr)
    }

    fn free(&mut self, ptr: u64, _size: u64) -> DeviceResult<()> {
        if ptr == 0 {
            return Ok(());
        }
        let Some((size, charge)) = self.live.remove(&ptr) else {
            self.push(Op::CudaFree, 0, ptr, 0, 1);
            return Err(invalid(
                "cudaFree",
                format!("{ptr:#x} is not a live allocation"),
            ));
        };
        self.unplace(ptr, charge);
        self.counters.cuda_free += 1;
        self.push(Op::CudaFree, size, ptr, 0, 0);
        Ok(())
    }

    fn mem_get_info(&mut self) -> DeviceResult<MemInfo> {
        Ok(MemInfo {
            free: self.config.capacity.saturating_sub(self.phys_used),
            total: self.config.capacity,
        })
    }

    fn record_event(&mut self, _stream: StreamId) -> DeviceResult<EventId> {
        let id = self.next_event;
        self.next_event += 1;
        if self.config.event_delay > 0 {
            self.pending_events.insert(id, self.config.event_delay);
        }
        Ok(EventId(id))
    }

    fn query_event(&mut self, event: EventId) -> DeviceResult<bool> {
        match self.pending_events.get_mut(&event.0) {
            None => Ok(true),
            Some(left) => {
                *left -= 1;
                if *left == 0 {
                    self.pending_events.remove(&event.0);
                }
                Ok(false)
            }
        }
    }

    fn synchronize_event(&mut self, event: EventId) -> DeviceResult<()> {
        self.pending_events.remove(&event.0);
        Ok(())
    }

    fn supports_vmm(&self) -> bool {
        self.config.vmm
    }

    fn granularity(&self) -> u64 {
        2 * MIB
    }

    fn address_reserve(&mut self, size: u64) -> DeviceResult<u64> {
        if !self.config.vmm {
            return Err(DeviceError::NotSupported {
                call: "cuMemAddressReserve",
            });
        }
        // The fake rejects a size that is not a multiple of the granularity before it logs.
        if size == 0 || !size.is_multiple_of(2 * MIB) {
            return Err(invalid(
                "cuMemAddressReserve",
                format!("size {size} is not a multiple of 2 MiB"),
            ));
        }
        let Some(ptr) = self.vmm_ranges.take(size, 2 * MIB) else {
            self.push(Op::AddressReserve, size, 0, 0, 2);
            return Err(DeviceError::OutOfMemory);
        };
        self.reservations.insert(ptr, size);
        self.counters.address_reserve += 1;
        self.push(Op::AddressReserve, size, ptr, 0, 0);
        Ok(ptr)
    }

    fn address_free(&mut self, ptr: u64, size: u64) -> DeviceResult<()> {
        if self.reservations.get(&ptr) != Some(&size) {
            self.push(Op::AddressFree, size, ptr, 0, 1);
            return Err(invalid(
                "cuMemAddressFree",
                format!("no reservation of {size} bytes at {ptr:#x}"),
            ));
        }
        self.reservations.remove(&ptr);
        self.vmm_ranges.give_back(ptr, size);
        self.counters.address_free += 1;
        self.push(Op::AddressFree, size, ptr, 0, 0);
        Ok(())
    }

    fn mem_create(&mut self, size: u64) -> DeviceResult<MemHandle> {
        // As for reservations, the fake rejects a bad size before it logs.
        if size == 0 || !size.is_multiple_of(2 * MIB) {
            return Err(invalid(
                "cuMemCreate",
                format!("size {size} is not a multiple of 2 MiB"),
            ));
        }
        if !self.charge(size) {
            self.counters.mem_create_failed += 1;
            self.push(Op::MemCreate, size, 0, 0, 2);
            return Err(DeviceError::OutOfMemory);
        }
        let id = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(
            id,
            Handle {
                size,
                mapped: false,
                released: false,
            },
        );
        self.counters.mem_create += 1;
        self.push(Op::MemCreate, size, 0, id, 0);
        Ok(MemHandle(id))
    }

    fn mem_release(&mut self, handle: MemHandle, size: u64) -> DeviceResult<()> {
        match self.handles.get_mut(&handle.0) {
            Some(h) if !h.released => h.released = true,
            _ => {
                self.push(Op::MemRelease, size, 0, handle.0, 1);
                return Err(invalid(
                    "cuMemRelease",
                    format!("unknown handle {}", handle.0),
                ));
            }
        }
        self.maybe_uncharge(handle.0);
        self.counters.mem_release += 1;
        self.push(Op::MemRelease, size, 0, handle.0, 0);
        Ok(())
    }

    fn mem_map(&mut self, ptr: u64, size: u64, handle: MemHandle) -> DeviceResult<()> {
        let ok = matches!(self.handles.get(&handle.0), Some(h) if h.size == size && !h.mapped && !h.released)
            && !self.mappings.contains_key(&ptr);
        if !ok {
            self.push(Op::MemMap, size, ptr, handle.0, 1);
            return Err(invalid(
                "cuMemMap",
                format!("cannot map handle {} at {ptr:#x}", handle.0),
            ));
        }
        self.handles.get_mut(&handle.0).expect("checked").mapped = true;
        self.mappings.insert(ptr, handle.0);
        self.counters.mem_map += 1;
        self.push(Op::MemMap, size, ptr, handle.0, 0);
        Ok(())
    }

    fn mem_unmap(&mut self, ptr: u64, size: u64, handle: MemHandle) -> DeviceResult<()> {
        if self.mappings.get(&ptr) != Some(&handle.0) {
            self.push(Op::MemUnmap, size, ptr, handle.0, 1);
            return Err(invalid("cuMemUnmap", format!("no mapping at {ptr:#x}")));
        }
        self.mappings.remove(&ptr);
        if let Some(h) = self.handles.get_mut(&handle.0) {
            h.mapped = false;
        }
        self.maybe_uncharge(handle.0);
        self.counters.mem_unmap += 1;
        self.push(Op::MemUnmap, size, ptr, handle.0, 0);
        Ok(())
    }

    fn malloc_async(&mut self, size: u64, _stream: StreamId) -> DeviceResult<u64> {
        self.pool_malloc(size)
    }

    fn free_async(
        &mut self,
        ptr: u64,
        _size: u64,
        _stream: StreamId,
        _also_used_on: &[StreamId],
    ) -> DeviceResult<()> {
        self.pool_free(ptr)
    }

    fn trim(&mut self, _keep: u64) -> DeviceResult<()> {
        Ok(())
    }

    fn pool_usage(&mut self) -> DeviceResult<PoolUsage> {
        Ok(self.pool_usage_now())
    }

    fn reset_pool_peaks(&mut self) -> DeviceResult<()> {
        self.pool_reset_peaks();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
