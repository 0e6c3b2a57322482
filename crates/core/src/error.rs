//! [`AllocError`]: why an allocator call failed, the one error type of every backend (the
//! caching allocator, `backend:cudaMallocAsync`, no caching) and of [`crate::MemoryResource`].

use cachalot_device::DeviceError;

use crate::async_backend::AsyncOomReport;
use crate::config::Backend;
use crate::oom::OomReport;

/// Why an allocator call failed. Out-of-memory variants display torch 2.15's exact message;
/// the others quote what was passed in and say what would be valid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// The caching allocator could not serve the request even after freeing its cache
    /// (torch's `OutOfMemoryError`).
    #[error("{0}")]
    OutOfMemory(Box<OomReport>),
    /// `backend:cudaMallocAsync` could not serve the request, or it would pass the
    /// memory-fraction limit (torch's `OutOfMemoryError` of that backend).
    #[error("{0}")]
    PoolOutOfMemory(Box<AsyncOomReport>),
    /// `free` or `record_stream` of an address that is not a live allocation.
    #[error(
        "invalid device pointer: {ptr:#x} (not an allocation of this allocator, or already freed)"
    )]
    InvalidPointer {
        /// The address passed in.
        ptr: u64,
    },
    /// `set_memory_fraction` outside [0, 1].
    #[error("invalid memory fraction {fraction}: expected a number in [0, 1]")]
    InvalidMemoryFraction {
        /// The fraction passed in.
        fraction: f64,
    },
    /// Something the backend does not do (torch's text for it).
    #[error("{}", unsupported_text(*backend, *operation))]
    Unsupported {
        /// The backend asked.
        backend: Backend,
        /// What it was asked to do.
        operation: Operation,
    },
    /// Misuse of the private-pool calls (torch's message).
    #[error("{0}")]
    Pool(#[from] crate::pool_id::PoolError),
    /// A device call failed for a reason other than lack of memory (with no caching, a failed
    /// `cudaMalloc` too: torch raises it as a CUDA error).
    #[error("device error: {0}")]
    Device(#[from] DeviceError),
}

/// A broken internal invariant of the caching allocator, found by
/// [`crate::CachingAllocator::check_invariants`]: a bug in cachalot, never the caller's fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allocator invariant broken: {message}")]
#[non_exhaustive]
pub struct InvariantError {
    /// Which invariant, and the blocks or numbers that break it.
    pub message: String,
}

/// What a backend may not support ([`AllocError::Unsupported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// `torch.cuda.memory_snapshot()` / `memory._snapshot()`.
    Snapshot,
    /// `torch.cuda.memory._record_memory_history()`.
    RecordHistory,
}

fn unsupported_text(backend: Backend, op: Operation) -> String {
    match (op, backend) {
        (Operation::Snapshot, Backend::CudaMallocAsync) => "Calling snapshot with \
             backend:cudaMallocAsync is not meaningful. (For backend:native, snapshot returns a \
             detailed summary of all blocks tracked by the allocator, but the cudaMallocAsync \
             backend does not track individual blocks.)"
            .into(),
        (Operation::Snapshot, _) => "PYTORCH_NO_CUDA_MEMORY_CACHING=1: no blocks are cached, so \
             there is nothing to snapshot"
            .into(),
        (Operation::RecordHistory, b) => format!(
            "{} does not yet support recordHistory. If you need it, please file an issue \
             describing your use case.",
            b.torch_name()
        ),
    }
}

impl AllocError {
    /// Whether this is an out-of-memory error (`torch.OutOfMemoryError`, any backend).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            AllocError::OutOfMemory(_) | AllocError::PoolOutOfMemory(_)
        )
    }

    /// Whether the address given was not a live allocation.
    pub fn is_invalid_pointer(&self) -> bool {
        matches!(self, AllocError::InvalidPointer { .. })
    }
}
