//! The RMM rows that drive private pools, `empty_cache` and `record_stream` (the oracle's
//! README, "Private pools, `empty_cache` and `record_stream`"): their names and pool ids.

use crate::ids::parse_number;

/// The rows that drive private pools, `empty_cache` and `record_stream`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolAction {
    PoolBegin,
    PoolEnd,
    GraphBegin,
    GraphEnd,
    PoolRelease,
    EmptyCache,
    RecordStream,
}

impl PoolAction {
    pub(crate) const ALL: [PoolAction; 7] = [
        PoolAction::PoolBegin,
        PoolAction::PoolEnd,
        PoolAction::GraphBegin,
        PoolAction::GraphEnd,
        PoolAction::PoolRelease,
        PoolAction::EmptyCache,
        PoolAction::RecordStream,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            PoolAction::PoolBegin => "pool_begin",
            PoolAction::PoolEnd => "pool_end",
            PoolAction::GraphBegin => "graph_begin",
            PoolAction::GraphEnd => "graph_end",
            PoolAction::PoolRelease => "pool_release",
            PoolAction::EmptyCache => "empty_cache",
            PoolAction::RecordStream => "record_stream",
        }
    }
}

/// A pool row's Pointer as a number: decimal or `0x` hex, a null token
/// (`(nil)`, `nullptr`, `NULL`) being 0; `None` if it is neither.
pub(crate) fn pool_id(field: &[u8]) -> Option<u64> {
    match parse_number(field) {
        Ok(v) => Some(v),
        Err(_) if [&b"(nil)"[..], b"nullptr", b"NULL"].contains(&field) => Some(0),
        Err(_) => None,
    }
}
