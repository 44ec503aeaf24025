//! Position ranges `[start, end)` of a data file's rows (pure): runs of deleted positions,
//! their unions, and the row selection that reads what they leave out.

use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use roaring::RoaringTreemap;

/// Runs of consecutive positions as `[start, end)` ranges.
pub(super) fn runs(d: &RoaringTreemap) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for p in d.iter() {
        match out.last_mut() {
            Some(r) if r.1 == p => r.1 += 1,
            _ => out.push((p, p + 1)),
        }
    }
    out
}

/// Merges two ascending lists of disjoint ranges.
pub(super) fn merge_ranges(a: Vec<(u64, u64)>, b: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = a.into_iter().chain(b).collect();
    all.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
    for r in all {
        match out.last_mut() {
            Some(l) if r.0 <= l.1 => l.1 = l.1.max(r.1),
            _ => out.push(r),
        }
    }
    out
}

/// The rows of position ranges `read` (the row groups read, in order) outside the ascending,
/// disjoint position ranges `absent`, as a selection over the rows of those row groups.
pub(super) fn selection_in(read: &[(u64, u64)], absent: &[(u64, u64)]) -> RowSelection {
    let mut out: Vec<RowSelector> = Vec::new();
    let mut push = |skip: bool, n: u64| {
        if n == 0 {
            return;
        }
        match out.last_mut() {
            Some(s) if s.skip == skip => s.row_count += n as usize,
            _ => out.push(if skip {
                RowSelector::skip(n as usize)
            } else {
                RowSelector::select(n as usize)
            }),
        }
    };
    let mut at = 0;
    for &(start, end) in read {
        while absent.get(at).is_some_and(|r| r.1 <= start) {
            at += 1;
        }
        let mut next = start;
        while let Some(&(s, e)) = absent.get(at).filter(|r| r.0 < end) {
            let s = s.max(next);
            push(false, s - next);
            push(true, e.min(end) - s);
            next = e.min(end);
            if e > end {
                break;
            }
            at += 1;
        }
        push(false, end - next);
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_skip_absent_ranges_of_the_row_groups_read() {
        let sel = selection_in(&[(0, 7)], &[(1, 3), (5, 6)]);
        assert_eq!(sel.row_count(), 4);
        // Over two ranges read (row groups [0, 4) and [8, 12)): deletes 2 and 9 skipped.
        let sel = selection_in(&[(0, 4), (8, 12)], &[(2, 3), (5, 6), (9, 10)]);
        assert_eq!((sel.row_count(), sel.skipped_row_count()), (6, 2));
        // A range absent across row groups read and the gap between them.
        let sel = selection_in(&[(0, 4), (8, 12)], &[(3, 9)]);
        assert_eq!((sel.row_count(), sel.skipped_row_count()), (6, 2));
        let mut d = RoaringTreemap::new();
        d.extend([1u64, 2, 5, 9]);
        assert_eq!(runs(&d), [(1, 3), (5, 6), (9, 10)]);
        assert_eq!(
            merge_ranges(runs(&d), vec![(4, 6), (20, 30)]),
            [(1, 3), (4, 6), (9, 10), (20, 30)]
        );
    }
}
