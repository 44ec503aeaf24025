//! Which manifests a commit merges, by Iceberg Java's `ManifestMergeManager` rules: within one
//! group (one partition spec, data or deletes), manifests are packed from the oldest end into
//! bins of at most `commit.manifest.target-size-bytes`; a bin of one manifest is kept as it
//! is, and so is the bin holding the group's first (newest) manifest while it has fewer than
//! `commit.manifest.min-count-to-merge`; every other bin becomes one manifest. Pure.

/// What becomes of a group's manifests, in their order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MergeStep {
    /// The manifest at this index is kept as it is.
    Keep(usize),
    /// The manifests at these indexes (ascending) are written as one.
    Merge(Vec<usize>),
}

/// The steps for one group whose manifests (newest first) have `lengths` bytes.
pub(super) fn plan_merge(lengths: &[u64], target: u64, min_count: usize) -> Vec<MergeStep> {
    // Greedy bins from the end (Java's `ListPacker::packEnd` with a lookback of 1): the
    // oldest manifests fill whole bins, the newest bin holds what is left.
    let mut bins: Vec<Vec<usize>> = Vec::new();
    let mut bin: Vec<usize> = Vec::new();
    let mut weight = 0u64;
    for i in (0..lengths.len()).rev() {
        let w = lengths[i];
        if !bin.is_empty() && weight.saturating_add(w) > target {
            bins.push(std::mem::take(&mut bin));
            weight = 0;
        }
        bin.push(i);
        weight = weight.saturating_add(w);
    }
    if !bin.is_empty() {
        bins.push(bin);
    }
    bins.reverse();
    let mut out = Vec::new();
    for mut bin in bins {
        bin.reverse();
        if bin.len() == 1 || (bin.contains(&0) && bin.len() < min_count) {
            out.extend(bin.into_iter().map(MergeStep::Keep));
        } else {
            out.push(MergeStep::Merge(bin));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::MergeStep::{Keep, Merge};
    use super::*;

    #[test]
    fn the_newest_bin_waits_for_min_count_and_older_bins_merge() {
        // 5 manifests of 10 bytes, target 100, min count 100: one bin with the newest: kept.
        assert_eq!(
            plan_merge(&[10; 5], 100, 100),
            (0..5).map(Keep).collect::<Vec<_>>()
        );
        // min count 5: that bin merges.
        assert_eq!(
            plan_merge(&[10; 5], 100, 5),
            vec![Merge(vec![0, 1, 2, 3, 4])]
        );
        // Target 25: bins packed from the oldest end: {3,4}, {1,2}, {0}.
        assert_eq!(
            plan_merge(&[10; 5], 25, 100),
            vec![Keep(0), Merge(vec![1, 2]), Merge(vec![3, 4])]
        );
        // A manifest past the target is a bin of its own, kept.
        assert_eq!(
            plan_merge(&[10, 500, 10, 10], 100, 2),
            vec![Keep(0), Keep(1), Merge(vec![2, 3])]
        );
        assert!(plan_merge(&[], 100, 2).is_empty());
        // Every manifest is in exactly one step, in order.
        let steps = plan_merge(&[7, 3, 90, 4, 4, 60, 1, 1, 1], 64, 3);
        let order: Vec<usize> = steps
            .iter()
            .flat_map(|s| match s {
                Keep(i) => vec![*i],
                Merge(b) => b.clone(),
            })
            .collect();
        assert_eq!(order, (0..9).collect::<Vec<_>>());
    }
}
