//! The out-of-memory report with torch 2.15's text (the errors are in `error.rs`).

use cachalot_device::{DeviceError, StreamId};

// The paths import the error from here, next to the report it carries.
pub(crate) use crate::error::AllocError;

/// Formats a byte count as torch's `format_size` does: bytes up to 1 KiB, then KiB, MiB and
/// GiB with two decimals.
pub fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    if bytes <= KIB {
        format!("{bytes} bytes")
    } else if bytes <= KIB * KIB {
        format!("{:.2} KiB", bytes as f64 / 1024.0)
    } else if bytes <= KIB * KIB * KIB {
        format!("{:.2} MiB", bytes as f64 / 1_048_576.0)
    } else {
        format!("{:.2} GiB", bytes as f64 / 1_073_741_824.0)
    }
}

/// Why a request ran out of memory; each cause has its own torch 2.15 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OomCause {
    /// The device (or the memory-fraction limit) could not hold a new segment after the whole
    /// retry ladder.
    #[default]
    DeviceFull,
    /// `throw_on_cudamalloc_oom:True` without a fraction: the new segment would have taken
    /// reserved memory past the device's capacity, so torch refused it before calling the
    /// device (counted in `num_oom_rejections`, not `num_ooms`).
    PreemptiveRejection,
    /// With `expandable_segments_reserve` set, the request is bigger than one segment's
    /// address reservation of `reserve` bytes (but not bigger than the device).
    ExceedsExpandableReserve {
        /// The reserve asked for, in bytes.
        reserve: u64,
    },
    /// Rounding the request overflows 64 bits. torch 2.15 wraps around here (a corrupt
    /// block or an internal assert); cachalot reports an ordinary, counted out-of-memory.
    SizeOverflow,
}

/// Everything known when a request could not be served, as numbers. `Display` is torch
/// 2.15's `OutOfMemoryError` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomReport {
    /// Device ordinal.
    pub device: u32,
    /// The stream of the request.
    pub stream: StreamId,
    /// The size asked for, unrounded.
    pub requested: u64,
    /// The request after rounding (the block size it needed).
    pub rounded: u64,
    /// The segment size the allocator tried to obtain ("Tried to allocate").
    pub alloc_size: u64,
    /// Device capacity as `cudaMemGetInfo` reports it.
    pub device_total: u64,
    /// Free device memory as `cudaMemGetInfo` reports it.
    pub device_free: u64,
    /// Bytes allocated to users (`allocated_bytes.all.current`).
    pub allocated: u64,
    /// Bytes the allocator holds from the device (`reserved_bytes.all.current`).
    pub reserved: u64,
    /// The per-process limit, when a memory fraction below 1 is set.
    pub allowed: Option<u64>,
    /// Whether expandable segments were enabled (torch then gives different advice).
    pub expandable_segments: bool,
    /// What kind of failure this is.
    pub cause: OomCause,
    /// Free bytes cached in private pools, which torch's message counts as "allocated in
    /// private pools" (it sums the pools' free sets).
    pub private_pool_cached: u64,
    /// The pool the request was routed to (`(0, 0)`: the default pools); only that pool's
    /// free blocks could have served it.
    pub pool: crate::pool_id::MempoolId,
    /// The torch release whose message this is (the advice at its end changed across
    /// releases).
    pub torch: crate::config::TorchVersion,
}

impl OomReport {
    /// Reserved bytes that no allocation uses: cached free blocks.
    pub fn reserved_unallocated(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated)
    }
}

impl std::fmt::Display for OomReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cause == OomCause::PreemptiveRejection {
            return write!(
                f,
                "CUDA out of memory. Allocation was preemptively rejected because it would exceed per_process_memory_fraction limit. Requested size: {}",
                format_size(self.requested)
            );
        }
        let allowed = match self.allowed {
            Some(a) => format!("{} allowed; ", format_size(a)),
            None => String::new(),
        };
        let private = self.private_pool_cached;
        let private_msg = if private > 0 {
            format!(
                "with {} allocated in private pools (e.g., CUDA Graphs), ",
                format_size(private)
            )
        } else {
            String::new()
        };
        write!(
            f,
            "CUDA out of memory. Tried to allocate {}. GPU {} has a total capacity of {} of which {} is free. {}Of the allocated memory {} is allocated by PyTorch, {}and {} is reserved by PyTorch but unallocated.",
            format_size(self.alloc_size),
            self.device,
            format_size(self.device_total),
            format_size(self.device_free),
            allowed,
            format_size(self.allocated + private),
            private_msg,
            format_size(self.reserved_unallocated().saturating_sub(private)),
        )?;
        if let OomCause::ExceedsExpandableReserve { reserve } = self.cause {
            write!(
                f,
                " This allocation exceeds the expandable-segment reserve of {} for this stream, and a single allocation cannot span expandable segments. Raise PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve or expandable_segments_reserve_by_class (or unset it) so that a segment is at least {}.",
                format_size(reserve),
                format_size(self.alloc_size)
            )
        } else {
            f.write_str(self.torch.oom_advice(self.expandable_segments))
        }
    }
}

impl AllocError {
    /// The message torch 2.15 raises for this error as a fatal `c10::Error` (what the oracle
    /// prints as `fatal_error`): `CUDA error: …` for runtime calls, `CUDA driver error: …`
    /// for driver calls; other errors keep their own text.
    pub fn torch_message(&self) -> String {
        let AllocError::Device(e) = self else {
            return self.to_string();
        };
        let (call, message) = match e {
            DeviceError::OutOfMemory => ("cudaMalloc", "out of memory"),
            DeviceError::Driver { call, message } => (*call, message.as_str()),
            DeviceError::NotSupported { call } => (*call, "operation not supported"),
        };
        let (text, name) = if message.starts_with("out of memory") {
            ("out of memory", "cudaErrorMemoryAllocation")
        } else if message.starts_with("invalid value") {
            ("invalid argument", "cudaErrorInvalidValue")
        } else if message.starts_with("operation not supported") {
            ("operation not supported", "cudaErrorNotSupported")
        } else {
            (message, "cudaErrorUnknown")
        };
        if call.starts_with("cuda") {
            format!(
                "CUDA error: {text}\nSearch for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
            )
        } else {
            format!("CUDA driver error: {text}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_size_matches_torch_examples() {
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1025), "1.00 KiB");
        assert_eq!(format_size(20 << 20), "20.00 MiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size(80 << 30), "80.00 GiB");
        assert_eq!(format_size(1 << 60), "1073741824.00 GiB");
    }

    #[test]
    fn format_size_rounds_ties_like_printf() {
        // 1.125 KiB is exact in binary: printf rounds half to even, giving 1.12.
        assert_eq!(format_size(1152), "1.12 KiB");
        // 1.375 -> 1.38 (even neighbour is 8).
        assert_eq!(format_size(1408), "1.38 KiB");
    }
}
