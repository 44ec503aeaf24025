//! Table maintenance with the option names and result columns of Iceberg's Spark procedures:
//! compaction (`rewrite_data_files`, `rewrite_position_delete_files`), `expire_snapshots`,
//! `remove_orphan_files` (and `discard_staging_job`, a failed distributed write's files),
//! `rewrite_manifests`; a clone-safe `drop_table` purge; and `maintain`, which decides from
//! a table's state and policy which of these are worth running, under a lease.

mod carry_deletes;
mod dangling;
mod expire;
mod lease;
mod maintain;
mod orphans;
mod purge;
mod reachable;
mod rewrite_data_files;
mod rewrite_deletes;
mod rewrite_manifests;
mod rewrite_plan;

pub use expire::{expire_snapshots, ExpireOptions, ExpireResult};
pub use lease::{default_holder, lease_holder, Lease, LeaseHolder};
pub use maintain::{maintain, maintain_with_lease, MaintainOptions, MaintainReport, MaintainStep};
pub use orphans::{discard_staging_job, remove_orphan_files, OrphanResult};
pub use purge::{drop_table, DropResult};
pub(crate) use rewrite_data_files::{commit_rewrite, commit_rewrite_groups, execute_task};
pub use rewrite_data_files::{
    plan_rewrite, rewrite_data_files, PlannedRewrite, Progress, RewritePlan, RewriteResult,
    RewriteTask, TaskResult,
};
pub use rewrite_deletes::{rewrite_position_delete_files, RewriteDeletesResult};
pub use rewrite_manifests::{rewrite_manifests, RewriteManifestsResult};
pub use rewrite_plan::{RewriteJobOrder, RewriteOptions};
