//! Which c10 stream a [`StreamId`] is, for the one place where torch's behaviour depends on
//! it: the order in which `process_events` and `synchronize_and_free_events` walk the
//! outstanding events, stream by stream. torch keeps them in a
//! `ska::flat_hash_map<CUDAStream, deque>` (`cuda_events`), so with events on two or more
//! streams the blocks they hold return to the pool in that table's slot order
//! ([`crate::ska_order`]), which the `inactive_split` peak, merges and reuse then show.
//!
//! A `CUDAStream` hashes as `c10::Stream::hash()`: the device type (CUDA = 1) in bits 56-63,
//! the device index in bits 48-55, and the low 48 bits of the c10 stream id. A pool stream's id
//! is `index << 5 | priority_type << 1 | 1` (`torch.cuda.Stream().stream_id`: 3, 35, 67, …), the
//! default stream's 0, and an external stream's its `cudaStream_t` itself. cachalot sees
//! `cudaStream_t` handles only, so a front end that knows the ids (`cachalot.torch`) registers
//! them with [`register_c10_stream`]; any other stream hashes as an external stream with its
//! handle as id on device 0 (exactly right for the default stream and external streams).
//! Stream handles are process-wide, and so is this registry.

use std::sync::RwLock;

use cachalot_device::StreamId;
use rustc_hash::FxHashMap;

/// The c10 hash of each registered stream handle.
static C10_HASHES: RwLock<Option<FxHashMap<u64, u64>>> = RwLock::new(None);

/// `c10::Stream::hash()` of a CUDA stream with c10 id `id` on device `device`.
pub fn c10_stream_hash(device: u8, id: i64) -> u64 {
    (1u64 << 56) | (u64::from(device) << 48) | (id as u64 & ((1u64 << 48) - 1))
}

/// Records that the stream handle `stream` is c10's stream `id` on `device` (from
/// `torch.cuda.Stream().stream_id`), so that events on it are walked in torch's order. Call
/// it before the stream's first `record_stream`; a later call takes effect for tables built
/// afterwards.
pub fn register_c10_stream(stream: StreamId, device: u8, id: i64) {
    let mut m = C10_HASHES.write().unwrap_or_else(|e| e.into_inner());
    m.get_or_insert_with(FxHashMap::default)
        .insert(stream.0, c10_stream_hash(device, id));
}

/// The hash torch's `cuda_events` table gives `stream` ([`register_c10_stream`], else the
/// handle as an external stream's id on device 0).
pub(crate) fn stream_hash(stream: StreamId) -> u64 {
    let m = C10_HASHES.read().unwrap_or_else(|e| e.into_inner());
    m.as_ref()
        .and_then(|m| m.get(&stream.0).copied())
        .unwrap_or_else(|| c10_stream_hash(0, stream.0 as i64))
}
