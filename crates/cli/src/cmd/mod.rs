//! One module per subcommand.

pub mod compare;
pub mod config;
pub mod convert;
pub mod explain;
pub mod replay;
pub mod tune;
