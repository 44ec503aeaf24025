//! Which row groups and pages of a file the direct reader reads: statistics, bloom filters and
//! the page index against the scan's row group filter.

use super::chunks::Blooms;

/// Which row groups of a file are read.
pub(super) struct RowGroupChoice {
    /// Indexes of the row groups read.
    pub kept: Vec<usize>,
    /// Their position ranges.
    pub read: Vec<(u64, u64)>,
    /// The position ranges of the others.
    pub pruned: Vec<(u64, u64)>,
    /// Position ranges inside the row groups read whose pages (of the filter's columns) the
    /// page index rules out, ascending.
    pub pages_pruned: Vec<(u64, u64)>,
}

/// The row groups of a file that may hold rows the filter keeps (statistics, then bloom
/// filters when the file's bytes are at hand), and inside them the rows whose pages may (page
/// index, when loaded). Counts them in the filter's counters.
pub(super) fn prune_row_groups(
    meta: &parquet::file::metadata::ParquetMetaData,
    blooms: &Blooms,
    filter: &crate::scan::RowGroupFilter,
) -> RowGroupChoice {
    let metrics = crate::expr::row_group_metrics(meta, &filter.schema, &filter.nan_free);
    let descr = meta.file_metadata().schema_descr();
    // Top-level primitive columns by field id: their leaf index and physical type (what a
    // bloom filter hashed).
    let leaves: std::collections::HashMap<i32, (usize, parquet::basic::Type)> = (0..descr
        .num_columns())
        .filter_map(|c| {
            let col = descr.column(c);
            let info = col.self_type().get_basic_info();
            (col.path().parts().len() == 1 && col.max_rep_level() == 0 && info.has_id())
                .then(|| (info.id(), (c, col.physical_type())))
        })
        .collect();
    let mut choice = RowGroupChoice {
        kept: Vec::new(),
        read: Vec::new(),
        pruned: Vec::new(),
        pages_pruned: Vec::new(),
    };
    let (mut by_bloom, mut pages, mut pruned_pages) = (0, 0, 0);
    let mut start = 0u64;
    for (i, rg) in meta.row_groups().iter().enumerate() {
        let end = start + rg.num_rows().max(0) as u64;
        let by_stats = metrics
            .get(i)
            .is_none_or(|m| crate::expr::may_match(&filter.predicate, m));
        let mut filters: std::collections::HashMap<usize, Option<parquet::bloom_filter::Sbbf>> =
            Default::default();
        let mut absent = |id: i32, v: &iceberg::spec::Datum| -> Option<bool> {
            let &(c, physical) = leaves.get(&id)?;
            let chunk = rg.column(c);
            chunk.bloom_filter_offset()?;
            let f = filters.entry(c).or_insert_with(|| blooms.read(chunk));
            crate::expr::bloom_proves_absent(f.as_ref()?, physical, v)
        };
        let may = by_stats && {
            let b = crate::expr::bloom_may_match(&filter.predicate, &mut absent);
            by_bloom += usize::from(!b);
            b
        };
        let page = may
            .then(|| {
                crate::expr::page_choice(
                    meta,
                    i,
                    &filter.schema,
                    &filter.predicate,
                    &filter.nan_free,
                )
            })
            .flatten();
        if let Some(p) = &page {
            pages += p.pages;
            pruned_pages += p.pruned_pages;
        }
        let keep: Vec<(u64, u64)> = match &page {
            Some(p) => p.keep.iter().map(|(s, e)| (start + s, start + e)).collect(),
            None => vec![(start, end)],
        };
        if may && !keep.is_empty() {
            choice.kept.push(i);
            choice.read.push((start, end));
            let mut next = start;
            for &(s, e) in &keep {
                if s > next {
                    choice.pages_pruned.push((next, s));
                }
                next = e;
            }
            if end > next {
                choice.pages_pruned.push((next, end));
            }
        } else {
            choice.pruned.push((start, end));
        }
        start = end;
    }
    filter
        .counters
        .add(meta.row_groups().len(), choice.pruned.len(), by_bloom);
    filter.counters.add_pages(pages, pruned_pages);
    choice
}
