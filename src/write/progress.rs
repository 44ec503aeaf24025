//! Progress reporting hook for long writes (the CLI renders it with indicatif).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A shared counter of rows written, read by a progress bar.
#[derive(Debug, Clone, Default)]
pub struct WriteProgress {
    rows: Arc<AtomicU64>,
}

impl WriteProgress {
    /// A new counter at zero.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the rows written so far.
    pub fn set_rows(&self, rows: u64) {
        self.rows.store(rows, Ordering::Relaxed);
    }
    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }
}
