//! What a replay drives: a [`MemoryResource`] (core's one allocator interface, for whichever
//! backend the configuration names), and how the replay reads a failed allocation.

use cachalot_core::{AllocError, Backend, DeviceError, MemoryResource, OomReport};
use cachalot_sim::SimDevice;

/// The allocator a replay runs.
pub(crate) type Target = MemoryResource<SimDevice>;

/// A failed allocation, as the replay sees it.
pub(crate) enum MallocError {
    /// Out of memory: the numbers (caching allocator only), and torch's message.
    OutOfMemory(Option<Box<OomReport>>, String),
    /// Anything else stops the replay.
    Fatal(AllocError),
}

impl MallocError {
    /// Sorts an allocation error of `backend`: the direct backends also report a failed device
    /// allocation as an out-of-memory error.
    pub fn of(e: AllocError, backend: Backend) -> Self {
        match e {
            AllocError::OutOfMemory(r) => {
                let message = r.to_string();
                MallocError::OutOfMemory(Some(r), message)
            }
            AllocError::PoolOutOfMemory(_) => MallocError::OutOfMemory(None, e.to_string()),
            AllocError::Device(DeviceError::OutOfMemory) if !backend.caches() => {
                MallocError::OutOfMemory(None, e.to_string())
            }
            e => MallocError::Fatal(e),
        }
    }
}
