//! Row-level changes: DELETE, UPDATE and MERGE, in copy-on-write or merge-on-read as the
//! table's `write.{delete,update,merge}.mode` says.

mod equality;
mod execute;
mod merge;
mod merge_source;
mod statement;

pub use crate::txn::{Alignment, MergeCounts, RowLevelResult};
pub use equality::delete_by_key;
pub use execute::{execute, execute_with};
pub use merge::merge;
pub use merge_source::SourceRows;
pub use statement::{delete, update};
