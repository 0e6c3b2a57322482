//! The leaf types that name pools, and the errors of the pool calls: torch's `MempoolId_t`
//! ([`MempoolId`]), which default pool a block is in ([`PoolKind`]), which free sets a block
//! belongs to ([`PoolRef`]), and misuse of the pool calls ([`PoolError`]). They depend on
//! nothing else in the crate, so the blocks, the statistics and the errors can name them
//! without reaching into the private-pool machinery of [`crate::mempool`].

/// Which pool a block belongs to (the default small or large pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Blocks of at most 1 MiB, in 2 MiB segments.
    Small,
    /// Everything else.
    Large,
}

impl PoolKind {
    /// Whether this is the small pool.
    #[inline]
    pub fn is_small(self) -> bool {
        self == PoolKind::Small
    }
}

/// A pool's id, torch's `MempoolId_t`: `(n, 0)` for a pool made by CUDA-graph capture,
/// `(0, n)` for one made by `graph_pool_handle()` / `MemPool()`; `(0, 0)` means the default
/// pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MempoolId {
    /// Set for pools created by `CUDAGraph::capture_begin`.
    pub first: u64,
    /// Set for pools created by `graph_pool_handle` (and `torch.cuda.MemPool`).
    pub second: u64,
}

impl MempoolId {
    /// The default pools.
    pub const DEFAULT: MempoolId = MempoolId {
        first: 0,
        second: 0,
    };

    /// A CUDA-graph pool, `(n, 0)`.
    pub fn graph(n: u64) -> Self {
        MempoolId {
            first: n,
            second: 0,
        }
    }

    /// A `MemPool` / `graph_pool_handle` pool, `(0, n)`.
    pub fn mempool(n: u64) -> Self {
        MempoolId {
            first: 0,
            second: n,
        }
    }

    /// Whether this names the default pools.
    pub fn is_default(self) -> bool {
        self == MempoolId::DEFAULT
    }

    /// `MempoolIdHash`.
    pub(crate) fn hash(self) -> u64 {
        if self.first != 0 {
            self.first
        } else {
            self.second
        }
    }
}

impl std::fmt::Display for MempoolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {})", self.first, self.second)
    }
}

/// Misuse of the pool calls, with torch 2.15's messages (`file:line` as in its build).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// `beginAllocateToPool` of a pool that is open already.
    #[error("beginAllocateToPool: already recording to mempool_id")]
    AlreadyRecording(MempoolId),
    /// `endAllocateToPool` of a pool that is not open.
    #[error("endAllocatePool: not currently recording to mempool_id")]
    NotRecording(MempoolId),
    /// `releasePool` of a pool torch does not have.
    #[error(
        "it != graph_pools.end() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDACachingAllocator.cpp\":3481, please report a bug to PyTorch. "
    )]
    NoSuchPool(MempoolId),
    /// More `releasePool` calls than references.
    #[error(
        "uc >= 0 INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDACachingAllocator.cpp\":3373, please report a bug to PyTorch. "
    )]
    ReleasedTooOften(MempoolId),
    /// Reuse of a pool whose count reached 0 before torch forgot it.
    #[error(
        "it->second->use_count > 0 INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDACachingAllocator.cpp\":3473, please report a bug to PyTorch. "
    )]
    Released(MempoolId),
    /// An unmap of a private pool's pages when torch counts no segment for the pool: the
    /// pool took over the storage of a forgotten pool and unmaps a page the forgotten pool
    /// mapped (see `PrivatePools::slot_for_new_pool`).
    #[error(
        "block->pool->owner_PrivatePool->cudaMalloc_count > 0 INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDACachingAllocator.cpp\":4393, please report a bug to PyTorch. "
    )]
    UnmapUncounted(MempoolId),
    /// `markCaptureEnd` without an open capture (torch's capture tracker,
    /// `CUDAGraphMemory.cpp`).
    #[error(
        "active_captures_ > 0 INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDAGraphMemory.cpp\":12, please report a bug to PyTorch. captureEnd called with no active capture"
    )]
    NoActiveCapture,
    /// `backend:cudaMallocAsync`: a second capture while one is open.
    #[error("Only one capture at a time is allowed in a process.")]
    AsyncCaptureUnderway,
    /// `backend:cudaMallocAsync`: the end of a capture that was not begun.
    #[error(
        "CudaMallocAsync::notifyCaptureAboutToEnd called, but CudaMallocAsync::capture_underway is false."
    )]
    AsyncNoCapture,
    /// `backend:cudaMallocAsync` has no private pools.
    #[error(
        "cudaMallocAsync does not yet support createOrIncrefPool. If you need it, please file an issue describing your use case."
    )]
    Unsupported,
}

impl PoolError {
    /// How torch's use count of the pool had changed when it raised this: torch counts the
    /// reference before it checks (`AlreadyRecording`: +1; `ReleasedTooOften`: -1), while
    /// cachalot leaves the count as it was. A replay reports torch's number.
    pub fn torch_use_count_delta(&self) -> i32 {
        match self {
            PoolError::AlreadyRecording(_) => 1,
            PoolError::ReleasedTooOften(_) => -1,
            _ => 0,
        }
    }
}

/// Which free sets a block or request belongs to: a pool kind of the default pools
/// (`owner` 0) or of the private pool numbered `owner` (torch's `BlockPool*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolRef {
    /// 0 for the default pools, else 1 + the private pool's slot.
    pub owner: u32,
    /// Small or large.
    pub kind: PoolKind,
}

impl PoolRef {
    /// The default pool of `kind`.
    pub const fn default_pool(kind: PoolKind) -> Self {
        PoolRef { owner: 0, kind }
    }

    /// Whether this is a small pool.
    #[inline]
    pub fn is_small(self) -> bool {
        self.kind.is_small()
    }
}
