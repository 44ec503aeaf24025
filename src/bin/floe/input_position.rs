//! How far the reader of an open input file has got, for the progress bar to move inside a
//! big file: the bytes a CSV or JSON-lines reader pulled from the file, or for Parquet the
//! file's total rows (the rows read tell the share). Registered by path when a reader opens
//! the file, taken by [`crate::input::counted`].

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where a reader is in its file.
#[derive(Clone, Debug)]
pub enum Position {
    /// Bytes pulled from the file so far.
    Bytes(Arc<AtomicU64>),
    /// The file holds this many rows.
    Rows(u64),
}

static OPEN: Mutex<Vec<(String, Position)>> = Mutex::new(Vec::new());

/// Positions kept at most (a reader nobody counts, a sink's upsert of a file, leaves its
/// entry until it is pushed out).
const KEPT: usize = 1024;

fn register(path: &str, p: Position) {
    if let Ok(mut open) = OPEN.lock() {
        open.retain(|(q, _)| q != path);
        if open.len() >= KEPT {
            open.remove(0);
        }
        open.push((path.to_string(), p));
    }
}

/// The position registered for `path` (forgotten: a file is counted once).
pub fn take(path: &str) -> Option<Position> {
    let mut open = OPEN.lock().ok()?;
    let i = open.iter().position(|(q, _)| q == path)?;
    Some(open.remove(i).1)
}

/// Registers a Parquet file of `rows` rows.
pub fn parquet(path: &str, rows: u64) {
    register(path, Position::Rows(rows));
}

/// `inner` (the file at `path`), counting the bytes read from it.
pub fn counting<R: Read>(path: &str, inner: R) -> Counting<R> {
    let read = Arc::new(AtomicU64::new(0));
    register(path, Position::Bytes(read.clone()));
    Counting { inner, read }
}

/// A reader that counts its bytes.
pub struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl Position {
    /// The bytes of a file of `size` bytes read so far, `rows` of its rows read.
    pub fn bytes_done(&self, size: u64, rows: u64) -> u64 {
        match self {
            Position::Bytes(n) => n.load(Ordering::Relaxed).min(size),
            Position::Rows(0) => 0,
            Position::Rows(total) => {
                (u128::from(size) * u128::from(rows.min(*total)) / u128::from(*total)) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_bytes_or_share_rows() {
        let mut r = counting("/x/a.csv", std::io::Cursor::new(vec![7u8; 100]));
        let mut buf = [0u8; 30];
        r.read_exact(&mut buf).unwrap();
        let p = take("/x/a.csv").unwrap();
        assert_eq!(p.bytes_done(100, 0), 30);
        assert!(take("/x/a.csv").is_none());
        parquet("/x/b.parquet", 1000);
        let p = take("/x/b.parquet").unwrap();
        assert_eq!(p.bytes_done(5000, 250), 1250);
        assert_eq!(p.bytes_done(5000, 2000), 5000);
    }
}
