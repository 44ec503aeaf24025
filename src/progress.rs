//! Progress of long work, for a caller's progress bar: engines count the data files they
//! read and the rows and bytes they write; the caller reads a [`ProgressState`] whenever it
//! likes. Counting is opt-in and free when off: run the work inside [`Progress::scope`], and
//! every scan, writer and engine in that task (and the tasks they spawn) counts into it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A point-in-time copy of a [`Progress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgressState {
    /// Input files planned (data files a scan will read, input files of an append).
    pub files_total: u64,
    /// Of those, files read to the end.
    pub files_done: u64,
    /// Bytes of the planned input files.
    pub bytes_total: u64,
    /// Bytes of the input files read to the end.
    pub bytes_done: u64,
    /// Rows read from input files (after a scan's filter and deletes).
    pub rows_read: u64,
    /// Rows handed to data file writers.
    pub rows_written: u64,
    /// Bytes of the data and delete files written.
    pub bytes_written: u64,
}

#[derive(Debug, Default)]
struct Counters {
    files_total: AtomicU64,
    files_done: AtomicU64,
    bytes_total: AtomicU64,
    bytes_done: AtomicU64,
    rows_read: AtomicU64,
    rows_written: AtomicU64,
    bytes_written: AtomicU64,
}

/// Shared progress counters (cheap to clone; clones count into the same totals).
#[derive(Clone, Debug, Default)]
pub struct Progress(Arc<Counters>);

tokio::task_local! {
    static CURRENT: Progress;
}

impl Progress {
    /// New counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` with these counters as the current ones: the engines it calls count into them.
    pub async fn scope<F: Future>(&self, f: F) -> F::Output {
        CURRENT.scope(self.clone(), f).await
    }

    /// The counters of the enclosing [`Progress::scope`], if any (engines take them before
    /// spawning tasks, which do not inherit the scope).
    pub fn current() -> Option<Progress> {
        CURRENT.try_with(|p| p.clone()).ok()
    }

    /// The counts now.
    pub fn state(&self) -> ProgressState {
        let c = &self.0;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProgressState {
            files_total: get(&c.files_total),
            files_done: get(&c.files_done),
            bytes_total: get(&c.bytes_total),
            bytes_done: get(&c.bytes_done),
            rows_read: get(&c.rows_read),
            rows_written: get(&c.rows_written),
            bytes_written: get(&c.bytes_written),
        }
    }

    /// Adds `files` input files of `bytes` bytes to the work planned.
    pub fn add_planned(&self, files: u64, bytes: u64) {
        self.0.files_total.fetch_add(files, Ordering::Relaxed);
        self.0.bytes_total.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts one planned input file as read, with the `bytes` of it not yet counted by
    /// [`Progress::add_bytes_read`].
    pub fn add_file_done(&self, bytes: u64) {
        self.0.files_done.fetch_add(1, Ordering::Relaxed);
        self.0.bytes_done.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts `bytes` of a planned input file as read (the rest with
    /// [`Progress::add_file_done`] when it ends).
    pub fn add_bytes_read(&self, bytes: u64) {
        self.0.bytes_done.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts rows read from input files.
    pub fn add_rows_read(&self, rows: u64) {
        self.0.rows_read.fetch_add(rows, Ordering::Relaxed);
    }

    /// Counts rows handed to a data file writer.
    pub fn add_rows_written(&self, rows: u64) {
        self.0.rows_written.fetch_add(rows, Ordering::Relaxed);
    }

    /// Counts the bytes of a data or delete file written.
    pub fn add_bytes_written(&self, bytes: u64) {
        self.0.bytes_written.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Runs `f` with the current progress, if any.
pub(crate) fn with_current(f: impl FnOnce(&Progress)) {
    let _ = CURRENT.try_with(f);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_inside_the_scope_only() {
        with_current(|p| p.add_rows_read(5));
        let p = Progress::new();
        p.scope(async {
            with_current(|p| p.add_planned(2, 100));
            with_current(|p| p.add_file_done(60));
            let inner = Progress::current().unwrap();
            tokio::spawn(async move { inner.add_rows_read(7) })
                .await
                .unwrap();
        })
        .await;
        with_current(|p| p.add_rows_read(5));
        assert_eq!(
            p.state(),
            ProgressState {
                files_total: 2,
                files_done: 1,
                bytes_total: 100,
                bytes_done: 60,
                rows_read: 7,
                ..Default::default()
            }
        );
    }
}
