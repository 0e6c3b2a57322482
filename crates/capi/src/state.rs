//! The library's process-wide state: the settings read from the environment once, one
//! allocator per device opened on first use, one segment source per device for
//! `torch.cuda.MemPool(allocator)` (see `segments`), also opened on first use, and the
//! counters of reported misuse.
//!
//! Environment:
//! - `PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF` / `CACHALOT_ALLOC_CONF` /
//!   `PYTORCH_NO_CUDA_MEMORY_CACHING` / `PYTORCH_NO_HIP_MEMORY_CACHING`: the configuration,
//!   read as torch 2.15 reads it ([`Settings::from_env`], the one settings path);
//! - `CACHALOT_DEVICE`: `cuda` (default) or `sim` (the simulated GPU, for tests anywhere);
//! - `CACHALOT_SIM_CAPACITY`: the simulated GPU's memory (`80G` by default; read by
//!   [`cachalot::parse_byte_size`]);
//! - `CACHALOT_VERBOSE=1`: one line on stderr saying what was set up;
//! - `CACHALOT_DEVICE_LOG=FILE`: every device memory call written to FILE, which must not
//!   exist yet (see `device_log`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cachalot::{
    Allocator, AsyncAllocator, Device, DirectMode, Settings, SimConfig, SimDevice, parse_byte_size,
};

/// The allocator type behind every device: real or simulated, chosen at run time.
pub type Alloc = Allocator<Box<dyn Device>>;

/// A device's segment source: core's direct allocator in [`DirectMode::Segments`].
pub type Segments = AsyncAllocator<Box<dyn Device>>;

/// Device ordinals the library serves (torch's `c10::Device` index is an `int8_t`).
pub const MAX_DEVICES: usize = 64;

/// Where memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Real GPUs through the CUDA driver.
    Cuda,
    /// Simulated GPUs (stream handles are plain numbers).
    Sim,
}

/// Everything the exported functions share.
pub struct Global {
    pub kind: Kind,
    pub settings: Settings,
    sim_capacity: u64,
    devices: [OnceLock<Result<Alloc, String>>; MAX_DEVICES],
    segment_sources: [OnceLock<Result<Segments, String>>; MAX_DEVICES],
    /// Frees of pointers no allocator knows.
    pub unknown_frees: AtomicU64,
    /// Device count torch passed to the init hook (0 until then).
    pub init_device_count: AtomicU64,
    /// Serializes snapshot dumps (they read every device).
    pub dump_lock: Mutex<()>,
    /// History recording asked for by `cachalot_record_history`, applied to devices opened
    /// later too: `None` = off, else the number of entries kept.
    pub history: Mutex<Option<usize>>,
    /// `CACHALOT_DEVICE_LOG`'s log, shared by every device opened.
    device_log: Option<std::sync::Arc<crate::device_log::CallLog>>,
}

static GLOBAL: OnceLock<Result<Global, String>> = OnceLock::new();

/// `index` as a slot of the device tables, or why not.
fn ordinal(index: i32) -> Result<usize, String> {
    usize::try_from(index)
        .ok()
        .filter(|&i| i < MAX_DEVICES)
        .ok_or_else(|| format!("device index {index} out of range 0..{MAX_DEVICES}"))
}

impl Global {
    fn from_env() -> Result<Global, String> {
        let settings =
            Settings::from_env().map_err(|e| format!("allocator configuration rejected: {e}"))?;
        for w in &settings.warnings {
            crate::report::report(&format!("warning: {w}"));
        }
        let kind = match std::env::var("CACHALOT_DEVICE").as_deref() {
            Err(_) | Ok("") | Ok("cuda") => Kind::Cuda,
            Ok("sim") => Kind::Sim,
            Ok(other) => return Err(format!("CACHALOT_DEVICE={other}: expected cuda or sim")),
        };
        let sim_capacity = match std::env::var("CACHALOT_SIM_CAPACITY") {
            Ok(s) => parse_byte_size(&s).map_err(|e| format!("CACHALOT_SIM_CAPACITY: {e}"))?,
            Err(_) => 80 << 30,
        };
        let device_log = match std::env::var("CACHALOT_DEVICE_LOG") {
            Ok(path) if !path.is_empty() => Some(crate::device_log::CallLog::create(&path)?),
            _ => None,
        };
        if std::env::var("CACHALOT_VERBOSE").as_deref() == Ok("1") {
            crate::report::report(&format!(
                "{:?} devices, backend {:?}, configuration from {}",
                kind,
                settings.backend(),
                settings.source
            ));
        }
        Ok(Global {
            kind,
            settings,
            sim_capacity,
            devices: std::array::from_fn(|_| OnceLock::new()),
            segment_sources: std::array::from_fn(|_| OnceLock::new()),
            unknown_frees: AtomicU64::new(0),
            init_device_count: AtomicU64::new(0),
            dump_lock: Mutex::new(()),
            history: Mutex::new(None),
            device_log,
        })
    }

    /// The state, set up from the environment on first use. A failure is printed once, here;
    /// later calls only return it.
    pub fn get() -> Result<&'static Global, String> {
        GLOBAL
            .get_or_init(|| Global::from_env().inspect_err(|e| crate::report::report(e)))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Device `index`, real or simulated. A simulated one takes the address range of
    /// simulated ordinal `slot`: the allocators' devices are slots `0..MAX_DEVICES` (device 0
    /// where the oracle's fake device puts memory, the others above it, so that an address
    /// names its device: record_stream has no device), the segment sources' the slots above
    /// those, so that no two hand out the same address.
    fn new_device(&self, index: usize, slot: usize) -> Result<Box<dyn Device>, String> {
        let device: Box<dyn Device> = match self.kind {
            Kind::Sim => {
                let config =
                    SimConfig::device_of_many(slot, self.sim_capacity).ok_or_else(|| {
                        format!(
                            "a simulated device of CACHALOT_SIM_CAPACITY={} bytes asks for 8 times \
                         that in addresses, and the {slot} before it leave too few below 2^64 \
                         for this one; use a smaller capacity or fewer devices",
                            self.sim_capacity
                        )
                    })?;
                Box::new(SimDevice::new(config))
            }
            Kind::Cuda => Box::new(cachalot::CudaDevice::new(index).map_err(|e| e.to_string())?),
        };
        Ok(match &self.device_log {
            Some(log) => Box::new(crate::device_log::Logged::new(device, log.clone())),
            None => device,
        })
    }

    fn open(&self, index: usize) -> Result<Alloc, String> {
        let device = self.new_device(index, index)?;
        let alloc = Allocator::with_index(&self.settings, device, index as u32)
            .map_err(|e| e.to_string())?;
        let history = *self.history.lock().unwrap_or_else(|e| e.into_inner());
        if history.is_some() {
            // Only the caching backend records history; the others say so when asked.
            let _ = alloc.record_history(history);
        }
        Ok(alloc)
    }

    /// The allocator of device `index` if the state and that device are open already: the
    /// path every call after the first takes, with no error to build. `None`: ask
    /// [`Global::device`], which opens it or says why not.
    #[inline]
    pub fn ready(index: i32) -> Option<&'static Alloc> {
        let g = GLOBAL.get()?.as_ref().ok()?;
        let slot = g.devices.get(usize::try_from(index).ok()?)?;
        slot.get()?.as_ref().ok()
    }

    /// The allocator of device `index`, opened on first use. A device that cannot be opened
    /// is reported once, when first asked for; later calls only return the error.
    pub fn device(&self, index: i32) -> Result<&Alloc, String> {
        let i = ordinal(index)?;
        self.devices[i]
            .get_or_init(|| {
                self.open(i)
                    .map_err(|e| format!("device {i}: {e}"))
                    .inspect_err(|e| crate::report::report(e))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The segment source of device `index` (`torch.cuda.MemPool(allocator)`), opened on first
    /// use; errors as for [`Global::device`].
    pub fn segment_source(&self, index: i32) -> Result<&Segments, String> {
        let i = ordinal(index)?;
        self.segment_sources[i]
            .get_or_init(|| {
                self.new_device(i, MAX_DEVICES + i)
                    .and_then(|d| {
                        Segments::with_index(&self.settings.conf, DirectMode::Segments, d, i as u32)
                            .map_err(|e| e.to_string())
                    })
                    .map_err(|e| format!("device {i}: {e}"))
                    .inspect_err(|e| crate::report::report(e))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The devices opened so far, with their ordinals.
    pub fn opened(&self) -> impl Iterator<Item = (usize, &Alloc)> {
        self.devices
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((i, d.get()?.as_ref().ok()?)))
    }

    /// Counts and reports a free of a pointer no allocator knows.
    pub fn report_unknown_free(&self, ptr: u64, device: i32, why: &str) {
        let n = self.unknown_frees.fetch_add(1, Ordering::Relaxed) + 1;
        crate::report::report(&format!(
            "ignored free of {ptr:#x} on device {device}: {why} ({n} so far)"
        ));
    }
}
