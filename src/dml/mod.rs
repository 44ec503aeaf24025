//! Row-level changes: DELETE, UPDATE and MERGE, in copy-on-write or merge-on-read as the
//! table's `write.{delete,update,merge}.mode` says.

mod engine;
mod equality;
mod execute;
mod merge;
mod merge_source;
mod statement;

pub(crate) use engine::file_scoped_deletes;
pub(crate) use engine::{run, stage, stage_known, CommitExtras, RowChanger, RowLevelKind, Staged};
pub use engine::{Alignment, RowLevelResult};
pub use equality::delete_by_key;
pub use execute::{execute, execute_with};
pub use merge::merge;
pub use merge_source::SourceRows;
pub use statement::{delete, update};
