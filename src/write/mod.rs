//! Writers: Arrow → Parquet data files and delete files. Nothing here commits; see
//! [`crate::txn`].

mod conform;
mod data;
mod deletes;
mod failed;
mod gather;
mod lane;
mod metrics;
mod parquet_props;
mod partition;
mod runs;
mod spill;
mod zorder;

pub(crate) use conform::write_default_row;
pub use conform::Conformer;
pub use data::DataWriter;
pub(crate) use deletes::DeleteFileWriter;
pub(crate) use partition::Partitioner;
pub(crate) use spill::PartitionSpill;
pub(crate) use zorder::zorder_columns;
