//! Table maintenance: compaction (`rewrite_data_files`), with the option names and result
//! columns of Iceberg's Spark procedures.

mod rewrite_data_files;
mod rewrite_plan;

pub use rewrite_data_files::{rewrite_data_files, Progress, RewriteResult};
pub use rewrite_plan::{plan_groups, FileGroup, RewriteOptions};
