//! Writers: Arrow → Parquet data files. Nothing here commits; see [`crate::txn`].

mod conform;
mod data;
mod metrics;
mod partition;
mod progress;

pub use conform::Conformer;
pub use data::DataWriter;
pub use progress::WriteProgress;
