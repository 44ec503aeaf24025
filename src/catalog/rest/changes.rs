//! A commit as the REST catalog protocol carries it: the difference between the base metadata
//! and the new one, expressed as `TableUpdate`s, guarded by the `TableRequirement`s that make
//! the server refuse it (409) when the table moved in a way the updates did not account for.
//!
//! Pure: no I/O. The requirements follow Iceberg Java's `UpdateRequirements`: the table UUID
//! always; every branch or tag the commit moves or removes must still point where it pointed
//! at the base; a new schema needs the last assigned field id, a new current schema the
//! current schema id, and likewise for partition specs and sort orders.

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::spec::{SnapshotReference, TableMetadata};
use iceberg::{TableRequirement, TableUpdate};

use crate::error::{Error, Result};
use crate::spec::refs;

/// The requirements and updates of one commit.
#[derive(Debug, Default)]
pub(crate) struct TableChanges {
    /// What the server checks against its current metadata first.
    pub requirements: Vec<TableRequirement>,
    /// What it then applies, in order.
    pub updates: Vec<TableUpdate>,
}

/// The changes that turn `base` into `new`.
pub(crate) fn diff(base: &TableMetadata, new: &TableMetadata) -> Result<TableChanges> {
    if base.uuid() != new.uuid() {
        return Err(Error::invalid(format!(
            "the new metadata belongs to table {} but the base is table {}",
            new.uuid(),
            base.uuid()
        )));
    }
    let mut c = TableChanges::default();
    c.requirements
        .push(TableRequirement::UuidMatch { uuid: base.uuid() });

    if new.format_version() != base.format_version() {
        c.updates.push(TableUpdate::UpgradeFormatVersion {
            format_version: new.format_version(),
        });
    }

    // Schemas.
    let old_schemas: HashSet<i32> = base.schemas_iter().map(|s| s.schema_id()).collect();
    let added_schemas = added(&old_schemas, new.schemas_iter(), |s| s.schema_id());
    if !added_schemas.is_empty() {
        c.requirements
            .push(TableRequirement::LastAssignedFieldIdMatch {
                last_assigned_field_id: base.last_column_id(),
            });
    }
    for s in &added_schemas {
        c.updates.push(TableUpdate::AddSchema {
            schema: s.as_ref().clone(),
        });
    }
    if new.current_schema_id() != base.current_schema_id() {
        c.requirements.push(TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: base.current_schema_id(),
        });
        c.updates.push(TableUpdate::SetCurrentSchema {
            schema_id: last_added_or(
                new.current_schema_id(),
                added_schemas.last().map(|s| s.schema_id()),
            ),
        });
    }

    // Partition specs.
    let old_specs: HashSet<i32> = base.partition_specs_iter().map(|s| s.spec_id()).collect();
    let added_specs = added(&old_specs, new.partition_specs_iter(), |s| s.spec_id());
    if !added_specs.is_empty() {
        c.requirements
            .push(TableRequirement::LastAssignedPartitionIdMatch {
                last_assigned_partition_id: base.last_partition_id(),
            });
    }
    for s in &added_specs {
        c.updates.push(TableUpdate::AddSpec {
            spec: s.as_ref().clone().into_unbound(),
        });
    }
    if new.default_partition_spec_id() != base.default_partition_spec_id() {
        c.requirements.push(TableRequirement::DefaultSpecIdMatch {
            default_spec_id: base.default_partition_spec_id(),
        });
        c.updates.push(TableUpdate::SetDefaultSpec {
            spec_id: last_added_or(
                new.default_partition_spec_id(),
                added_specs.last().map(|s| s.spec_id()),
            ),
        });
    }

    // Sort orders.
    let old_orders: HashSet<i64> = base.sort_orders_iter().map(|o| o.order_id).collect();
    let added_orders = added(&old_orders, new.sort_orders_iter(), |o| o.order_id);
    for o in &added_orders {
        c.updates.push(TableUpdate::AddSortOrder {
            sort_order: o.as_ref().clone(),
        });
    }
    if new.default_sort_order_id() != base.default_sort_order_id() {
        c.requirements
            .push(TableRequirement::DefaultSortOrderIdMatch {
                default_sort_order_id: base.default_sort_order_id(),
            });
        c.updates.push(TableUpdate::SetDefaultSortOrder {
            sort_order_id: last_added_or(
                new.default_sort_order_id(),
                added_orders.last().map(|o| o.order_id),
            ),
        });
    }

    if new.location() != base.location() {
        c.updates.push(TableUpdate::SetLocation {
            location: new.location().to_string(),
        });
    }

    // Properties.
    let set: HashMap<String, String> = new
        .properties()
        .iter()
        .filter(|(k, v)| base.properties().get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !set.is_empty() {
        c.updates.push(TableUpdate::SetProperties { updates: set });
    }
    let mut removed: Vec<String> = base
        .properties()
        .keys()
        .filter(|k| !new.properties().contains_key(*k))
        .cloned()
        .collect();
    if !removed.is_empty() {
        removed.sort();
        c.updates
            .push(TableUpdate::RemoveProperties { removals: removed });
    }

    // Snapshots, oldest first, then the refs that point at them.
    let mut added_snapshots: Vec<_> = new
        .snapshots()
        .filter(|s| base.snapshot_by_id(s.snapshot_id()).is_none())
        .collect();
    added_snapshots.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms()));
    for s in added_snapshots {
        c.updates.push(TableUpdate::AddSnapshot {
            snapshot: s.as_ref().clone(),
        });
    }
    let old_refs: BTreeMap<String, SnapshotReference> = refs(base).into_iter().collect();
    let new_refs: BTreeMap<String, SnapshotReference> = refs(new).into_iter().collect();
    for (name, r) in &new_refs {
        if old_refs.get(name) != Some(r) {
            c.requirements.push(TableRequirement::RefSnapshotIdMatch {
                r#ref: name.clone(),
                snapshot_id: old_refs.get(name).map(|o| o.snapshot_id),
            });
            c.updates.push(TableUpdate::SetSnapshotRef {
                ref_name: name.clone(),
                reference: r.clone(),
            });
        }
    }
    for (name, r) in &old_refs {
        if !new_refs.contains_key(name) {
            c.requirements.push(TableRequirement::RefSnapshotIdMatch {
                r#ref: name.clone(),
                snapshot_id: Some(r.snapshot_id),
            });
            c.updates.push(TableUpdate::RemoveSnapshotRef {
                ref_name: name.clone(),
            });
        }
    }
    let mut gone: Vec<i64> = base
        .snapshots()
        .map(|s| s.snapshot_id())
        .filter(|id| new.snapshot_by_id(*id).is_none())
        .collect();
    if !gone.is_empty() {
        gone.sort_unstable();
        c.updates
            .push(TableUpdate::RemoveSnapshots { snapshot_ids: gone });
    }

    // Statistics files.
    for s in new.statistics_iter() {
        if base.statistics_for_snapshot(s.snapshot_id) != Some(s) {
            c.updates.push(TableUpdate::SetStatistics {
                statistics: s.clone(),
            });
        }
    }
    for s in base.statistics_iter() {
        if new.statistics_for_snapshot(s.snapshot_id).is_none() {
            c.updates.push(TableUpdate::RemoveStatistics {
                snapshot_id: s.snapshot_id,
            });
        }
    }
    for s in new.partition_statistics_iter() {
        if base.partition_statistics_for_snapshot(s.snapshot_id) != Some(s) {
            c.updates.push(TableUpdate::SetPartitionStatistics {
                partition_statistics: s.clone(),
            });
        }
    }
    for s in base.partition_statistics_iter() {
        if new
            .partition_statistics_for_snapshot(s.snapshot_id)
            .is_none()
        {
            c.updates.push(TableUpdate::RemovePartitionStatistics {
                snapshot_id: s.snapshot_id,
            });
        }
    }

    // Specs and schemas that are no longer kept (after snapshot expiry).
    let gone_specs = dropped(&old_specs, |id| new.partition_spec_by_id(id).is_some());
    if !gone_specs.is_empty() {
        c.updates.push(TableUpdate::RemovePartitionSpecs {
            spec_ids: gone_specs,
        });
    }
    let gone_schemas = dropped(&old_schemas, |id| new.schema_by_id(id).is_some());
    if !gone_schemas.is_empty() {
        c.updates.push(TableUpdate::RemoveSchemas {
            schema_ids: gone_schemas,
        });
    }
    Ok(c)
}

/// The items of `new` whose id is not in `old`, by ascending id.
fn added<'a, T, K: Ord + std::hash::Hash>(
    old: &HashSet<K>,
    new: impl Iterator<Item = &'a T>,
    id: impl Fn(&T) -> K,
) -> Vec<&'a T>
where
    T: 'a,
{
    let mut out: Vec<&T> = new.filter(|t| !old.contains(&id(t))).collect();
    out.sort_by_key(|t| id(t));
    out
}

/// `-1` ("the one added last in this commit") when `id` is that one, as Java sends it: the
/// server may number what it adds differently from the client.
fn last_added_or<K: PartialEq + From<i8>>(id: K, last_added: Option<K>) -> K {
    if last_added.as_ref() == Some(&id) {
        K::from(-1)
    } else {
        id
    }
}

/// The ids of `old` for which `kept` is false, ascending.
fn dropped(old: &HashSet<i32>, kept: impl Fn(i32) -> bool) -> Vec<i32> {
    let mut out: Vec<i32> = old.iter().copied().filter(|id| !kept(*id)).collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{
        NestedField, Operation, PrimitiveType, Schema, Snapshot, SortOrder, Summary,
        TableMetadataBuilder, Type, UnboundPartitionSpec, MAIN_BRANCH,
    };

    /// The `key` of every object of a JSON array, in order.
    fn tags<'a>(v: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|u| u[key].as_str().unwrap())
            .collect()
    }

    fn base() -> TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![NestedField::optional(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            )
            .into()])
            .build()
            .unwrap();
        TableMetadataBuilder::new(
            schema,
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "s3://b/t".to_string(),
            iceberg::spec::FormatVersion::V2,
            HashMap::from([("a".to_string(), "1".to_string())]),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn with_snapshot(md: &TableMetadata, id: i64) -> TableMetadata {
        let snap = Snapshot::builder()
            .with_snapshot_id(id)
            .with_parent_snapshot_id(md.current_snapshot_id())
            .with_sequence_number(md.next_sequence_number())
            .with_timestamp_ms(md.last_updated_ms() + 1)
            .with_manifest_list(format!("s3://b/t/metadata/snap-{id}.avro"))
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: HashMap::new(),
            })
            .with_schema_id(0)
            .build();
        TableMetadataBuilder::new_from_metadata(md.clone(), None)
            .set_branch_snapshot(snap, MAIN_BRANCH)
            .unwrap()
            .build()
            .unwrap()
            .metadata
    }

    #[test]
    fn an_append_asserts_main_and_adds_the_snapshot() {
        let b = base();
        let n = with_snapshot(&b, 7);
        let c = diff(&b, &n).unwrap();
        let reqs = serde_json::to_value(&c.requirements).unwrap();
        assert_eq!(reqs[0]["type"], "assert-table-uuid");
        assert_eq!(reqs[1]["type"], "assert-ref-snapshot-id");
        assert_eq!(reqs[1]["ref"], "main");
        assert!(reqs[1]["snapshot-id"].is_null(), "{reqs}");
        let ups = serde_json::to_value(&c.updates).unwrap();
        let actions = tags(&ups, "action");
        assert_eq!(actions, ["add-snapshot", "set-snapshot-ref"], "{ups}");
        assert_eq!(ups[0]["snapshot"]["snapshot-id"], 7);
        assert_eq!(ups[1]["snapshot-id"], 7);
        assert_eq!(ups[1]["type"], "branch");

        // The next commit asserts the snapshot this one made.
        let n2 = with_snapshot(&n, 8);
        let c2 = diff(&n, &n2).unwrap();
        let reqs = serde_json::to_value(&c2.requirements).unwrap();
        assert_eq!(reqs[1]["snapshot-id"], 7);
    }

    #[test]
    fn properties_and_expiry_become_set_remove_updates() {
        let b = with_snapshot(&with_snapshot(&base(), 1), 2);
        let n = TableMetadataBuilder::new_from_metadata(b.clone(), None)
            .set_properties(HashMap::from([("b".to_string(), "2".to_string())]))
            .unwrap()
            .remove_snapshots(&[1])
            .build()
            .unwrap()
            .metadata;
        let c = diff(&b, &n).unwrap();
        let ups = serde_json::to_value(&c.updates).unwrap();
        let actions = tags(&ups, "action");
        assert_eq!(actions, ["set-properties", "remove-snapshots"], "{ups}");
        assert_eq!(ups[0]["updates"]["b"], "2");
        assert_eq!(ups[1]["snapshot-ids"][0], 1);
        // Only the UUID is asserted: no ref moved.
        assert_eq!(c.requirements.len(), 1);
    }

    #[test]
    fn schema_and_spec_evolution_guard_the_ids_they_assume() {
        let b = base();
        let wider = Schema::builder()
            .with_schema_id(1)
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let n = TableMetadataBuilder::new_from_metadata(b.clone(), None)
            .add_current_schema(wider)
            .unwrap()
            .add_default_partition_spec(
                UnboundPartitionSpec::builder()
                    .add_partition_field(1, "id_bucket", iceberg::spec::Transform::Bucket(4))
                    .unwrap()
                    .build(),
            )
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        let c = diff(&b, &n).unwrap();
        let reqs = serde_json::to_value(&c.requirements).unwrap();
        let types = tags(&reqs, "type");
        assert_eq!(
            types,
            [
                "assert-table-uuid",
                "assert-last-assigned-field-id",
                "assert-current-schema-id",
                "assert-last-assigned-partition-id",
                "assert-default-spec-id"
            ],
            "{reqs}"
        );
        assert_eq!(reqs[1]["last-assigned-field-id"], 1);
        let ups = serde_json::to_value(&c.updates).unwrap();
        let actions = tags(&ups, "action");
        assert_eq!(
            actions,
            [
                "add-schema",
                "set-current-schema",
                "add-spec",
                "set-default-spec"
            ],
            "{ups}"
        );
        // "The one added last": the server may number what it adds differently.
        assert_eq!(ups[1]["schema-id"], -1);
        assert_eq!(ups[3]["spec-id"], -1);
    }

    #[test]
    fn another_table_is_refused() {
        let a = base();
        let b = base();
        assert!(diff(&a, &b).is_err());
    }
}
