//! Table evolution (pure): the changes `ALTER TABLE` makes to a table's schema, partitioning,
//! sort order and properties, applied to its metadata by Iceberg Java's rules. Field ids are
//! never reused (new ones start above `last-column-id`), a column that is a partition source, a
//! sort key or an identifier field cannot be dropped, only safe type promotions are made, and a
//! change that would make existing rows unreadable (a required column with no default) is
//! refused.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    FormatVersion, Literal, NestedField, NestedFieldRef, PartitionSpec, PrimitiveType, Schema,
    SortOrder, StructType, TableMetadata, TableMetadataBuilder, Transform, Type,
    UnboundPartitionField, UnboundPartitionSpec,
};

use super::keyed::{defines_rule, is_keyed, KeyedSpec, MERGE_ENGINE};
use super::{parse_partition_spec, parse_schema, parse_sort_order, with_primary_key};
use crate::error::{Error, Result};

/// Where an added or moved column goes among its siblings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnPosition {
    /// After the last sibling.
    Last,
    /// Before the first sibling.
    First,
    /// Right after this sibling (its name, not a path).
    After(String),
}

/// One change `ALTER TABLE` makes. Column names are dotted paths through structs (`s.a`),
/// found as every user-written name is ([`super::resolve_field`]'s rule at each level).
#[derive(Debug, Clone, PartialEq)]
pub enum TableChange {
    /// `ADD COLUMN path type [NOT NULL] [DEFAULT v] [COMMENT c] [FIRST | AFTER x]`.
    AddColumn {
        /// The new column's path; its parent must be a struct.
        path: String,
        /// Its type (`parse_schema`'s syntax).
        ty: String,
        /// `NOT NULL`: only with a default (v3), so existing rows have a value.
        required: bool,
        /// v3: the `initial-default` (what existing rows read) and `write-default`.
        default: Option<String>,
        /// Its doc.
        comment: Option<String>,
        /// Its place.
        position: ColumnPosition,
    },
    /// `DROP COLUMN path`.
    DropColumn(String),
    /// `RENAME COLUMN path TO name` (the new leaf name).
    RenameColumn {
        /// The column.
        path: String,
        /// Its new name.
        to: String,
    },
    /// `ALTER COLUMN path TYPE t`: a promotion the spec allows.
    AlterType {
        /// The column.
        path: String,
        /// The wider type.
        ty: String,
    },
    /// `ALTER COLUMN path DROP NOT NULL`.
    MakeOptional(String),
    /// `ALTER COLUMN path COMMENT c` (`None`: drop the comment).
    SetComment {
        /// The column.
        path: String,
        /// The doc.
        comment: Option<String>,
    },
    /// `ALTER COLUMN path FIRST | AFTER x`.
    Move {
        /// The column.
        path: String,
        /// Its new place among its siblings.
        position: ColumnPosition,
    },
    /// `SET IDENTIFIER FIELDS a, b` (empty: `DROP IDENTIFIER FIELDS`).
    SetIdentifierFields(Vec<String>),
    /// `ADD PARTITION FIELD term [AS name]`.
    AddPartitionField {
        /// `bucket(16, id)`, `day(ts)`, `region`…
        term: String,
        /// The partition field's name (default: Java's, `id_bucket`, `ts_day`…).
        name: Option<String>,
    },
    /// `DROP PARTITION FIELD term-or-name`.
    DropPartitionField(String),
    /// `REPLACE PARTITION FIELD old WITH term [AS name]`.
    ReplacePartitionField {
        /// The field replaced (its term or name).
        old: String,
        /// The new term.
        term: String,
        /// The new field's name.
        name: Option<String>,
    },
    /// The whole partition spec replaced by these terms (`day(ts), bucket(16, id)`; empty:
    /// unpartitioned); a field kept keeps its id.
    ReplacePartitionSpec(String),
    /// `WRITE [LOCALLY] ORDERED BY …` / `WRITE UNORDERED` (an empty text): the default sort
    /// order, `col [ASC|DESC] [NULLS FIRST|LAST], …`.
    SetSortOrder(String),
    /// `SET TBLPROPERTIES`; `format-version` upgrades the table.
    SetProperties(Vec<(String, String)>),
    /// `UNSET TBLPROPERTIES [IF EXISTS]`.
    UnsetProperties {
        /// The keys.
        keys: Vec<String>,
        /// Without it, a key the table does not have is an error (Spark's rule).
        if_exists: bool,
    },
}

/// What a change depends on, to decide whether it still applies after a concurrent commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Basis {
    schema_id: Option<i32>,
    last_column_id: Option<i32>,
    spec_id: Option<i32>,
    sort_order_id: Option<i64>,
}

impl Basis {
    /// The parts of `md` that `changes` were planned on (properties are re-applied as they
    /// are, so they depend on nothing).
    pub fn of(md: &TableMetadata, changes: &[TableChange]) -> Self {
        let schema = changes.iter().any(|c| {
            !matches!(
                c,
                TableChange::SetProperties(_) | TableChange::UnsetProperties { .. }
            )
        });
        let spec = changes.iter().any(|c| {
            matches!(
                c,
                TableChange::AddPartitionField { .. }
                    | TableChange::DropPartitionField(_)
                    | TableChange::ReplacePartitionSpec(_)
                    | TableChange::ReplacePartitionField { .. }
            )
        });
        let sort = changes
            .iter()
            .any(|c| matches!(c, TableChange::SetSortOrder(_)));
        Basis {
            schema_id: schema.then(|| md.current_schema_id()),
            last_column_id: schema.then(|| md.last_column_id()),
            spec_id: spec.then(|| md.default_partition_spec_id()),
            sort_order_id: sort.then(|| md.default_sort_order_id()),
        }
    }

    /// `None` when `md` still has what the changes were planned on, else what changed.
    pub fn changed_in(&self, md: &TableMetadata) -> Option<&'static str> {
        if self.schema_id.is_some_and(|s| s != md.current_schema_id())
            || self
                .last_column_id
                .is_some_and(|l| l != md.last_column_id())
        {
            return Some("the schema");
        }
        if self
            .spec_id
            .is_some_and(|s| s != md.default_partition_spec_id())
        {
            return Some("the partition spec");
        }
        if self
            .sort_order_id
            .is_some_and(|s| s != md.default_sort_order_id())
        {
            return Some("the sort order");
        }
        None
    }
}

/// Properties `ALTER` may not change: what makes a keyed table's rows mean what they mean,
/// and what floe manages itself. `unset` tells an UNSET from a SET. A keyed table whose rule
/// does not resolve (set by an older floe) may have its rule properties set or unset, so it
/// can be mended; the result is checked whole like a create.
fn check_property(md: &TableMetadata, key: &str, unset: bool, table: &str) -> Result<()> {
    let keyed = is_keyed(md.current_schema(), md.properties());
    if keyed && defines_rule(key) && KeyedSpec::of(md, table).is_ok() {
        return Err(Error::invalid(format!(
            "table {table}: property '{key}' defines how the keyed table folds its rows and cannot \
             be changed after create (stored rows and tombstones were decided by it); create a \
             new table with the rule you want and copy the rows into it"
        )));
    }
    if key == super::keyed::TOMBSTONES && !unset {
        return Err(Error::invalid(format!(
            "table {table}: '{key}' lists the tombstone files floe writes and cannot be set by \
             ALTER; only UNSET (forgetting every tombstone: replays of older versions of deleted \
             keys then bring them back) is allowed"
        )));
    }
    if let Some(sink) = key
        .strip_prefix("floe.sink.")
        .and_then(|k| k.strip_suffix(".checkpoint"))
    {
        super::keyed::check_sink_id(sink).map_err(|e| e.context(format!("table {table}")))?;
    } else if key.starts_with("floe.sink.") {
        return Err(Error::invalid(format!(
            "table {table}: '{key}' is not a sink property; sink checkpoints are \
             'floe.sink.<sink id>.checkpoint'"
        )));
    }
    Ok(())
}

/// Checks the value of a property floe reads as a number.
fn check_property_value(key: &str, value: &str, table: &str) -> Result<()> {
    if key.starts_with("floe.sink.") && value.trim().parse::<i64>().is_err() {
        return Err(Error::invalid(format!(
            "table {table}: {key}='{value}' is not a checkpoint (a whole number)"
        )));
    }
    Ok(())
}

/// The table's metadata after `changes`, in order (one new schema, spec, sort order at most;
/// one commit). `table` names the table in errors; `location` is `md`'s metadata file, which
/// the new metadata's log records.
pub fn apply(
    md: &TableMetadata,
    changes: &[TableChange],
    table: &str,
    location: Option<&str>,
) -> Result<TableMetadata> {
    let err = |e: iceberg::Error| Error::invalid(format!("table {table}: {}", e.message()));
    let mut work = Work::new(md, table);
    let mut set: Vec<(String, String)> = Vec::new();
    let mut unset: Vec<String> = Vec::new();
    let mut version: Option<FormatVersion> = None;
    for c in changes {
        match c {
            TableChange::SetProperties(kv) => {
                for (k, v) in kv {
                    if k == "format-version" {
                        version = Some(upgrade_to(md, v, table)?);
                        continue;
                    }
                    check_property(md, k, false, table)?;
                    check_property_value(k, v, table)?;
                    unset.retain(|u| u != k);
                    set.retain(|(s, _)| s != k);
                    set.push((k.clone(), v.clone()));
                }
            }
            TableChange::UnsetProperties { keys, if_exists } => {
                for k in keys {
                    check_property(md, k, true, table)?;
                    let present =
                        md.properties().contains_key(k) || set.iter().any(|(s, _)| s == k);
                    if !present && !if_exists {
                        return Err(Error::invalid(format!(
                            "table {table} has no property '{k}' to unset (UNSET TBLPROPERTIES IF EXISTS ignores it)"
                        )));
                    }
                    set.retain(|(s, _)| s != k);
                    if md.properties().contains_key(k) && !unset.contains(k) {
                        unset.push(k.clone());
                    }
                }
            }
            other => work.change(other)?,
        }
    }
    let mut props: HashMap<String, String> = md.properties().clone();
    props.extend(set.iter().cloned());
    for k in &unset {
        props.remove(k);
    }
    super::check_property_keys(&props)?;
    if set
        .iter()
        .any(|(k, _)| k.starts_with(super::maintain_policy::MAINTAIN_PREFIX))
    {
        super::maintain_policy::MaintainPolicy::of(&props)?;
    }
    let mut b = TableMetadataBuilder::new_from_metadata(md.clone(), location.map(String::from));
    if let Some(v) = version {
        b = b.upgrade_format_version(v).map_err(err)?;
    }
    if let Some(schema) = work.schema_if_changed()? {
        b = b.add_current_schema(schema).map_err(err)?;
    }
    if let Some(spec) = work.spec.take() {
        b = b.add_default_partition_spec(spec).map_err(err)?;
    }
    if let Some(order) = work.order.take() {
        b = b
            .add_sort_order(order)
            .and_then(|b| b.set_default_sort_order(-1))
            .map_err(err)?;
    }
    if !set.is_empty() {
        b = b.set_properties(set.into_iter().collect()).map_err(err)?;
    }
    if !unset.is_empty() {
        b = b.remove_properties(&unset).map_err(err)?;
    }
    let next = b.build().map_err(err)?.metadata;
    if is_keyed(next.current_schema(), next.properties()) {
        KeyedSpec::check(next.current_schema(), next.properties(), table).map_err(|e| {
            if is_keyed(md.current_schema(), md.properties()) && KeyedSpec::of(md, table).is_err() {
                e.context(
                    "the table's merge rule is not valid already (an older floe let ALTER set \
                     it); mend it first: unset or set the property the error names",
                )
            } else {
                e.context("after ALTER, the keyed table would not be valid; nothing was committed")
            }
        })?;
    }
    Ok(next)
}

/// The format version `format-version=v` upgrades `md` to (a downgrade is refused).
fn upgrade_to(md: &TableMetadata, v: &str, table: &str) -> Result<FormatVersion> {
    let to = match v.trim() {
        "1" => FormatVersion::V1,
        "2" => FormatVersion::V2,
        "3" => FormatVersion::V3,
        o => {
            return Err(Error::invalid(format!(
                "table {table}: format-version '{o}': expected 1, 2 or 3"
            )))
        }
    };
    if to < md.format_version() {
        return Err(Error::invalid(format!(
            "table {table} is format v{}; it cannot be downgraded to v{v}",
            md.format_version() as u8
        )));
    }
    Ok(to)
}

/// The schema, spec and sort order being changed.
struct Work<'a> {
    md: &'a TableMetadata,
    table: &'a str,
    fields: Vec<NestedFieldRef>,
    identifier: Vec<i32>,
    next_id: i32,
    schema_changed: bool,
    spec: Option<UnboundPartitionSpec>,
    order: Option<SortOrder>,
}

/// An edit of one list of sibling fields.
type LevelEdit<'a> = Box<dyn FnOnce(&mut Vec<NestedFieldRef>) -> Result<()> + 'a>;

/// A column found by path: the indexes from the top, and the field.
struct Found {
    at: Vec<usize>,
    field: NestedFieldRef,
}

impl<'a> Work<'a> {
    fn new(md: &'a TableMetadata, table: &'a str) -> Self {
        let s = md.current_schema();
        Work {
            md,
            table,
            fields: s.as_struct().fields().to_vec(),
            identifier: s.identifier_field_ids().collect(),
            next_id: md.last_column_id() + 1,
            schema_changed: false,
            spec: None,
            order: None,
        }
    }

    fn invalid(&self, msg: String) -> Error {
        Error::invalid(format!("table {}: {msg}", self.table))
    }

    fn schema(&self) -> Result<Schema> {
        Schema::builder()
            .with_schema_id(self.md.current_schema_id())
            .with_fields(self.fields.clone())
            .with_identifier_field_ids(self.identifier.clone())
            .build()
            .map_err(|e| self.invalid(e.message().to_string()))
    }

    fn schema_if_changed(&self) -> Result<Option<Schema>> {
        if !self.schema_changed {
            return Ok(None);
        }
        Ok(Some(self.schema()?))
    }

    /// The field at `path` (struct levels only).
    fn find(&self, path: &str) -> Result<Found> {
        let mut at = Vec::new();
        let mut level: &[NestedFieldRef] = &self.fields;
        let parts: Vec<&str> = path.split('.').collect();
        let mut field: Option<NestedFieldRef> = None;
        for (depth, part) in parts.iter().enumerate() {
            let i = super::resolve_column(level.iter().map(|f| f.name.as_str()), part)?
                .ok_or_else(|| {
                    self.invalid(format!(
                        "no column '{path}'; {} has {}",
                        if depth == 0 {
                            "the table".to_string()
                        } else {
                            format!("'{}'", parts[..depth].join("."))
                        },
                        level
                            .iter()
                            .map(|f| f.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            at.push(i);
            let f = level[i].clone();
            if depth + 1 < parts.len() {
                match f.field_type.as_ref() {
                    Type::Struct(_) => {}
                    _ => {
                        return Err(self.invalid(format!(
                            "'{}' is not a struct, so '{path}' names nothing (fields inside lists and maps cannot be altered)",
                            parts[..=depth].join(".")
                        )))
                    }
                }
            }
            field = Some(f);
            level = match field.as_ref().map(|f| f.field_type.as_ref()) {
                Some(Type::Struct(s)) => s.fields(),
                _ => &[],
            };
        }
        let field = field.ok_or_else(|| self.invalid("an empty column name".into()))?;
        Ok(Found { at, field })
    }

    /// The sibling list at `parent` (indexes from the top), changed by `f`.
    fn edit_level(
        &mut self,
        parent: &[usize],
        f: impl FnOnce(&mut Vec<NestedFieldRef>) -> Result<()>,
    ) -> Result<()> {
        fn walk(
            fields: &mut Vec<NestedFieldRef>,
            parent: &[usize],
            f: LevelEdit<'_>,
        ) -> Result<()> {
            let Some((&i, rest)) = parent.split_first() else {
                return f(fields);
            };
            let field = fields[i].clone();
            let Type::Struct(s) = field.field_type.as_ref() else {
                return Err(Error::invalid("not a struct"));
            };
            let mut inner = s.fields().to_vec();
            walk(&mut inner, rest, f)?;
            let mut nf = (*field).clone();
            nf.field_type = Box::new(Type::Struct(StructType::new(inner)));
            fields[i] = Arc::new(nf);
            Ok(())
        }
        walk(&mut self.fields, parent, Box::new(f))?;
        self.schema_changed = true;
        Ok(())
    }

    /// Replaces the field at `found` by `f(field)`.
    fn edit_field(&mut self, found: &Found, f: impl FnOnce(&mut NestedField)) -> Result<()> {
        let (&last, parent) = found
            .at
            .split_last()
            .ok_or_else(|| self.invalid("an empty column name".into()))?;
        let mut nf = (*found.field).clone();
        f(&mut nf);
        self.edit_level(parent, move |level| {
            level[last] = Arc::new(nf);
            Ok(())
        })
    }

    /// Field ids the current spec, the sort order or the identifier fields use.
    fn used_by(&self, id: i32) -> Option<String> {
        if self.identifier.contains(&id) {
            return Some("an identifier field (SET IDENTIFIER FIELDS / --primary-key)".into());
        }
        // Files written under an older spec still carry its partition values: every spec's
        // sources stay (Java refuses these drops too).
        for spec in self.md.partition_specs_iter() {
            if let Some(pf) = spec.fields().iter().find(|p| p.source_id == id) {
                return Some(format!(
                    "the source of partition field '{}' (spec {})",
                    pf.name,
                    spec.spec_id()
                ));
            }
        }
        if let Some(pending) = &self.spec {
            if pending.fields().iter().any(|p| p.source_id == id) {
                return Some("the source of a partition field".into());
            }
        }
        let order = self
            .order
            .clone()
            .unwrap_or_else(|| (**self.md.default_sort_order()).clone());
        if order.fields.iter().any(|s| s.source_id == id) {
            return Some("a sort key of the table's sort order".into());
        }
        None
    }

    fn ids_within(f: &NestedField, out: &mut Vec<i32>) {
        out.push(f.id);
        match f.field_type.as_ref() {
            Type::Struct(s) => s.fields().iter().for_each(|c| Self::ids_within(c, out)),
            Type::List(l) => Self::ids_within(&l.element_field, out),
            Type::Map(m) => {
                Self::ids_within(&m.key_field, out);
                Self::ids_within(&m.value_field, out);
            }
            Type::Primitive(_) => {}
        }
    }

    /// `ty` with every field id renumbered from `next_id` (a type parsed on its own).
    fn renumber(&mut self, ty: &Type) -> Type {
        match ty {
            Type::Primitive(_) => ty.clone(),
            Type::Struct(s) => Type::Struct(StructType::new(
                s.fields()
                    .iter()
                    .map(|f| {
                        let id = self.take_id();
                        let inner = self.renumber(&f.field_type);
                        let mut nf = (**f).clone();
                        nf.id = id;
                        nf.field_type = Box::new(inner);
                        Arc::new(nf)
                    })
                    .collect(),
            )),
            Type::List(l) => {
                let id = self.take_id();
                let inner = self.renumber(&l.element_field.field_type);
                let mut e = (*l.element_field).clone();
                e.id = id;
                e.field_type = Box::new(inner);
                Type::List(iceberg::spec::ListType::new(Arc::new(e)))
            }
            Type::Map(m) => {
                let (kid, vid) = (self.take_id(), self.take_id());
                let kt = self.renumber(&m.key_field.field_type);
                let vt = self.renumber(&m.value_field.field_type);
                let mut k = (*m.key_field).clone();
                k.id = kid;
                k.field_type = Box::new(kt);
                let mut v = (*m.value_field).clone();
                v.id = vid;
                v.field_type = Box::new(vt);
                Type::Map(iceberg::spec::MapType::new(Arc::new(k), Arc::new(v)))
            }
        }
    }

    fn take_id(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn place(
        &self,
        level: &[NestedFieldRef],
        position: &ColumnPosition,
        what: &str,
    ) -> Result<usize> {
        Ok(match position {
            ColumnPosition::Last => level.len(),
            ColumnPosition::First => 0,
            ColumnPosition::After(x) => {
                super::resolve_column(level.iter().map(|f| f.name.as_str()), x)?.ok_or_else(
                    || self.invalid(format!("{what} AFTER '{x}': no such sibling column")),
                )? + 1
            }
        })
    }

    fn change(&mut self, c: &TableChange) -> Result<()> {
        match c {
            TableChange::AddColumn {
                path,
                ty,
                required,
                default,
                comment,
                position,
            } => self.add_column(path, ty, *required, default.as_deref(), comment, position),
            TableChange::DropColumn(path) => {
                let found = self.find(path)?;
                let mut ids = Vec::new();
                Self::ids_within(&found.field, &mut ids);
                for id in &ids {
                    if let Some(why) = self.used_by(*id) {
                        return Err(self.invalid(format!(
                            "column '{path}' cannot be dropped: it is (or holds) {why}; change that first"
                        )));
                    }
                }
                if found.at.len() == 1 && self.fields.len() == 1 {
                    return Err(self.invalid(format!(
                        "column '{path}' is the table's only column and cannot be dropped"
                    )));
                }
                let (&last, parent) = found.at.split_last().unwrap_or((&0, &[]));
                let parent = parent.to_vec();
                if !parent.is_empty() && self.level(&parent).len() == 1 {
                    return Err(self.invalid(format!(
                        "'{path}' is its struct's only field; drop the struct instead"
                    )));
                }
                self.edit_level(&parent, move |level| {
                    level.remove(last);
                    Ok(())
                })
            }
            TableChange::RenameColumn { path, to } => {
                let found = self.find(path)?;
                if to.is_empty() || to.contains('.') {
                    return Err(self.invalid(format!(
                        "RENAME COLUMN '{path}' TO '{to}': the new name must be a non-empty name without '.'"
                    )));
                }
                let to = to.clone();
                let (&last, parent) = found.at.split_last().unwrap_or((&0, &[]));
                let parent = parent.to_vec();
                let table = self.table.to_string();
                let from = path.clone();
                self.edit_level(&parent, move |level| {
                    if level
                        .iter()
                        .enumerate()
                        .any(|(i, f)| i != last && f.name.eq_ignore_ascii_case(&to))
                    {
                        return Err(Error::invalid(format!(
                            "table {table}: RENAME COLUMN '{from}' TO '{to}': a column of that name exists"
                        )));
                    }
                    let mut nf = (*level[last]).clone();
                    nf.name = to;
                    level[last] = Arc::new(nf);
                    Ok(())
                })
            }
            TableChange::AlterType { path, ty } => {
                let found = self.find(path)?;
                let to = parse_type(ty, self.table)?;
                let Type::Primitive(from) = found.field.field_type.as_ref() else {
                    return Err(self.invalid(format!(
                        "column '{path}' is a {}; only primitive columns change type",
                        found.field.field_type
                    )));
                };
                let Type::Primitive(to) = to else {
                    return Err(self.invalid(format!(
                        "ALTER COLUMN '{path}' TYPE {ty}: only primitive types are promotions"
                    )));
                };
                if *from == to {
                    return Ok(());
                }
                self.check_promotion(path, found.field.id, from, &to)?;
                let (initial, write) = (
                    promote_default(found.field.initial_default.clone(), &to),
                    promote_default(found.field.write_default.clone(), &to),
                );
                self.edit_field(&found, |f| {
                    *f.field_type = Type::Primitive(to);
                    f.initial_default = initial;
                    f.write_default = write;
                })
            }
            TableChange::MakeOptional(path) => {
                let found = self.find(path)?;
                if self.identifier.contains(&found.field.id) {
                    return Err(self.invalid(format!(
                        "column '{path}' is an identifier field, which must stay required; \
                         change the identifier fields first"
                    )));
                }
                self.edit_field(&found, |f| f.required = false)
            }
            TableChange::SetComment { path, comment } => {
                let found = self.find(path)?;
                let c = comment.clone();
                self.edit_field(&found, |f| f.doc = c)
            }
            TableChange::Move { path, position } => {
                let found = self.find(path)?;
                let (&last, parent) = found.at.split_last().unwrap_or((&0, &[]));
                let parent = parent.to_vec();
                if let ColumnPosition::After(x) = position {
                    if x.eq_ignore_ascii_case(&found.field.name) {
                        return Err(self.invalid(format!("'{path}' cannot move after itself")));
                    }
                }
                let mut level = self.level(&parent).to_vec();
                let moved = level.remove(last);
                let at = self.place(&level, position, "ALTER COLUMN")?;
                level.insert(at, moved);
                self.edit_level(&parent, move |l| {
                    *l = level;
                    Ok(())
                })
            }
            TableChange::SetIdentifierFields(cols) => {
                if self.md.properties().contains_key(MERGE_ENGINE) {
                    return Err(self.invalid(
                        "the identifier fields are the primary key of this keyed table and cannot \
                         change"
                            .into(),
                    ));
                }
                self.identifier.clear();
                let schema = self.schema()?;
                let keyed = with_primary_key(schema, cols)
                    .map_err(|e| e.context(format!("table {}", self.table)))?;
                self.identifier = keyed.identifier_field_ids().collect();
                self.schema_changed = true;
                Ok(())
            }
            TableChange::AddPartitionField { term, name } => self.add_partition(term, name),
            TableChange::DropPartitionField(which) => self.drop_partition(which),
            TableChange::ReplacePartitionField { old, term, name } => {
                self.drop_partition(old)?;
                self.add_partition(term, name)
            }
            TableChange::ReplacePartitionSpec(text) => {
                let current = self.current_spec();
                for f in current.fields() {
                    self.drop_partition(&f.name)?;
                }
                let schema = self.schema()?;
                let terms = if text.trim().is_empty() {
                    vec![]
                } else {
                    parse_partition_spec(text, &schema)
                        .map_err(|e| e.context(format!("table {}", self.table)))?
                        .fields()
                        .to_vec()
                };
                for t in terms {
                    let old = current
                        .fields()
                        .iter()
                        .find(|p| p.source_id == t.source_id && p.transform == t.transform);
                    self.push_partition_field(
                        t.source_id,
                        t.transform,
                        t.name.clone(),
                        old.and_then(|p| p.field_id),
                    )?;
                }
                Ok(())
            }
            TableChange::SetSortOrder(text) => {
                let schema = self.schema()?;
                let order = if text.trim().is_empty() {
                    SortOrder::unsorted_order()
                } else {
                    parse_sort_order(text, &schema)
                        .map_err(|e| e.context(format!("table {}", self.table)))?
                };
                self.order = Some(
                    SortOrder::builder()
                        .with_order_id(if order.fields.is_empty() { 0 } else { 1 })
                        .with_fields(order.fields)
                        .build_unbound()
                        .map_err(|e| self.invalid(e.message().to_string()))?,
                );
                Ok(())
            }
            TableChange::SetProperties(_) | TableChange::UnsetProperties { .. } => Ok(()),
        }
    }

    /// The sibling list at `parent`.
    fn level(&self, parent: &[usize]) -> &[NestedFieldRef] {
        let mut level: &[NestedFieldRef] = &self.fields;
        for &i in parent {
            if let Type::Struct(s) = level[i].field_type.as_ref() {
                level = s.fields();
            }
        }
        level
    }

    fn add_column(
        &mut self,
        path: &str,
        ty: &str,
        required: bool,
        default: Option<&str>,
        comment: &Option<String>,
        position: &ColumnPosition,
    ) -> Result<()> {
        let (parent_path, name) = match path.rsplit_once('.') {
            Some((p, n)) => (Some(p), n),
            None => (None, path),
        };
        if name.is_empty() {
            return Err(self.invalid(format!("ADD COLUMN '{path}': an empty name")));
        }
        let parent: Vec<usize> = match parent_path {
            None => vec![],
            Some(p) => {
                let f = self.find(p)?;
                if !matches!(f.field.field_type.as_ref(), Type::Struct(_)) {
                    return Err(self.invalid(format!("ADD COLUMN '{path}': '{p}' is not a struct")));
                }
                f.at
            }
        };
        if self
            .level(&parent)
            .iter()
            .any(|f| f.name.eq_ignore_ascii_case(name))
        {
            return Err(self.invalid(format!("ADD COLUMN '{path}': the column exists")));
        }
        let parsed = parse_type(ty, self.table)?;
        let v3 = self.md.format_version() >= FormatVersion::V3;
        let default = match default {
            None => None,
            Some(_) if !v3 => {
                return Err(self.invalid(format!(
                    "ADD COLUMN '{path}' DEFAULT: column defaults are format v3; upgrade the table \
                     (SET TBLPROPERTIES ('format-version'='3')) first"
                )))
            }
            Some(text) => Some(default_literal(&parsed, text).map_err(|e| {
                e.context(format!("table {}: ADD COLUMN '{path}' DEFAULT", self.table))
            })?),
        };
        if required && default.is_none() {
            return Err(self.invalid(format!(
                "ADD COLUMN '{path}' NOT NULL: existing rows have no value for it; add it \
                 nullable, or (format v3) with a DEFAULT"
            )));
        }
        let id = self.take_id();
        let ty = self.renumber(&parsed);
        let mut f = NestedField::new(id, name, ty, required);
        f.doc = comment.clone();
        if let Some(d) = default {
            f = f.with_initial_default(d.clone()).with_write_default(d);
        }
        let level = self.level(&parent).to_vec();
        let at = self.place(&level, position, "ADD COLUMN")?;
        let f = Arc::new(f);
        self.edit_level(&parent, move |l| {
            l.insert(at, f);
            Ok(())
        })
    }

    fn check_promotion(
        &self,
        path: &str,
        id: i32,
        from: &PrimitiveType,
        to: &PrimitiveType,
    ) -> Result<()> {
        use PrimitiveType as P;
        let v3 = self.md.format_version() >= FormatVersion::V3;
        let ok = match (from, to) {
            (P::Int, P::Long) | (P::Float, P::Double) => true,
            (
                P::Decimal {
                    precision: p1,
                    scale: s1,
                },
                P::Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) => s1 == s2 && p2 >= p1,
            (P::Date, P::Timestamp | P::TimestampNs) => v3,
            _ => false,
        };
        if !ok {
            return Err(self.invalid(format!(
                "column '{path}' cannot change from {from} to {to}: Iceberg allows int→long, \
                 float→double, decimal(P,S)→decimal(P',S) with P'≥P{}",
                if v3 {
                    ", date→timestamp(_ns)"
                } else {
                    " (and, in format v3, date→timestamp)"
                }
            )));
        }
        // A promotion must not change partition values (the spec's rule): bucketing a date
        // and the same instant as a timestamp hash differently.
        if matches!(from, P::Date) {
            for spec in self.md.partition_specs_iter() {
                if spec
                    .fields()
                    .iter()
                    .any(|p| p.source_id == id && matches!(p.transform, Transform::Bucket(_)))
                {
                    return Err(self.invalid(format!(
                        "column '{path}' is the source of a bucket partition; date→timestamp \
                         would change its bucket values"
                    )));
                }
            }
        }
        Ok(())
    }

    fn current_spec(&self) -> UnboundPartitionSpec {
        self.spec
            .clone()
            .unwrap_or_else(|| unbound(self.md.default_partition_spec()))
    }

    fn add_partition(&mut self, term: &str, name: &Option<String>) -> Result<()> {
        let schema = self.schema()?;
        let parsed = parse_partition_spec(term, &schema)
            .map_err(|e| e.context(format!("table {}", self.table)))?;
        let [new] = parsed.fields() else {
            return Err(self.invalid(format!("ADD PARTITION FIELD '{term}': one term at a time")));
        };
        let spec = self.current_spec();
        if spec
            .fields()
            .iter()
            .any(|p| p.source_id == new.source_id && p.transform == new.transform)
        {
            return Err(self.invalid(format!(
                "ADD PARTITION FIELD '{term}': the table is already partitioned by it"
            )));
        }
        let name = name.clone().unwrap_or_else(|| new.name.clone());
        if schema
            .field_by_name(&name)
            .is_some_and(|f| f.id != new.source_id)
        {
            return Err(self.invalid(format!(
                "ADD PARTITION FIELD '{term}': the name '{name}' is a column's; give another with AS"
            )));
        }
        self.push_partition_field(new.source_id, new.transform, name, None)
    }

    /// Adds a field to the pending spec, with `id` or a new one above every id used.
    fn push_partition_field(
        &mut self,
        source_id: i32,
        transform: Transform,
        name: String,
        id: Option<i32>,
    ) -> Result<()> {
        let spec = self.current_spec();
        let live = |p: &UnboundPartitionField| p.transform != Transform::Void;
        if spec.fields().iter().any(|p| live(p) && p.name == name) {
            return Err(self.invalid(format!(
                "partition field name '{name}' is taken; give another name"
            )));
        }
        let mut fields = spec.fields().to_vec();
        // v1: re-adding a field that was made void revives it.
        if let Some(v) = fields
            .iter_mut()
            .find(|p| p.source_id == source_id && p.transform == Transform::Void && p.name == name)
        {
            v.transform = transform;
        } else {
            let last = self.md.last_partition_id().max(
                spec.fields()
                    .iter()
                    .filter_map(|p| p.field_id)
                    .max()
                    .unwrap_or(999),
            );
            fields.push(UnboundPartitionField {
                source_id,
                field_id: Some(id.unwrap_or(last + 1)),
                name,
                transform,
            });
        }
        self.spec =
            Some(rebuild(&spec, fields).map_err(|e| e.context(format!("table {}", self.table)))?);
        Ok(())
    }

    fn drop_partition(&mut self, which: &str) -> Result<()> {
        let schema = self.schema()?;
        let spec = self.current_spec();
        let by_name = spec.fields().iter().position(|p| p.name == which);
        let at = match by_name {
            Some(i) => i,
            None => {
                let parsed = parse_partition_spec(which, &schema).map_err(|_| {
                    self.invalid(format!(
                        "DROP PARTITION FIELD '{which}': no partition field of that name or term; \
                         the fields: {}",
                        spec.fields()
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                let [t] = parsed.fields() else {
                    return Err(self.invalid(format!("DROP PARTITION FIELD '{which}': one term")));
                };
                spec.fields()
                    .iter()
                    .position(|p| p.source_id == t.source_id && p.transform == t.transform)
                    .ok_or_else(|| {
                        self.invalid(format!(
                            "DROP PARTITION FIELD '{which}': the table is not partitioned by it"
                        ))
                    })?
            }
        };
        let mut fields = spec.fields().to_vec();
        if self.md.format_version() == FormatVersion::V1 {
            // v1 specs keep every field: a dropped one becomes void (Java's rule).
            fields[at].transform = Transform::Void;
        } else {
            fields.remove(at);
        }
        self.spec = Some(rebuild(&spec, fields)?);
        Ok(())
    }
}

fn unbound(spec: &PartitionSpec) -> UnboundPartitionSpec {
    let fields = spec
        .fields()
        .iter()
        .map(|p| UnboundPartitionField {
            source_id: p.source_id,
            field_id: Some(p.field_id),
            name: p.name.clone(),
            transform: p.transform,
        })
        .collect::<Vec<_>>();
    UnboundPartitionSpec::builder()
        .with_spec_id(spec.spec_id())
        .add_partition_fields(fields)
        .map(|b| b.build())
        .unwrap_or_else(|_| UnboundPartitionSpec::builder().build())
}

fn rebuild(
    spec: &UnboundPartitionSpec,
    fields: Vec<UnboundPartitionField>,
) -> Result<UnboundPartitionSpec> {
    Ok(UnboundPartitionSpec::builder()
        .with_spec_id(spec.spec_id().unwrap_or(0))
        .add_partition_fields(fields)
        .map_err(|e| Error::invalid(e.message().to_string()))?
        .build())
}

/// A column default in the promoted type `to` (the same value).
fn promote_default(d: Option<Literal>, to: &PrimitiveType) -> Option<Literal> {
    use iceberg::spec::PrimitiveLiteral as L;
    match (d?, to) {
        (Literal::Primitive(L::Int(i)), PrimitiveType::Long) => {
            Some(Literal::Primitive(L::Long(i as i64)))
        }
        (Literal::Primitive(L::Float(f)), PrimitiveType::Double) => {
            Some(Literal::double(f.into_inner() as f64))
        }
        (Literal::Primitive(L::Int(days)), PrimitiveType::Timestamp) => {
            Some(Literal::Primitive(L::Long(days as i64 * 86_400_000_000)))
        }
        (Literal::Primitive(L::Int(days)), PrimitiveType::TimestampNs) => Some(Literal::Primitive(
            L::Long(days as i64 * 86_400_000_000_000),
        )),
        (other, _) => Some(other),
    }
}

/// A type in `parse_schema`'s syntax.
fn parse_type(ty: &str, table: &str) -> Result<Type> {
    let s = parse_schema(&format!("c {ty}"))
        .map_err(|e| e.context(format!("table {table}: type '{ty}'")))?;
    let f = s
        .as_struct()
        .fields()
        .first()
        .cloned()
        .ok_or_else(|| Error::invalid(format!("table {table}: type '{ty}'")))?;
    if f.required {
        return Err(Error::invalid(format!(
            "table {table}: type '{ty}': write NOT NULL after the type, not inside it"
        )));
    }
    Ok(*f.field_type.clone())
}

/// A default value for a column of type `ty` from its SQL text (a quoted string, a number,
/// true/false).
fn default_literal(ty: &Type, text: &str) -> Result<Literal> {
    let Type::Primitive(p) = ty else {
        return Err(Error::invalid(format!(
            "'{text}': only primitive columns take a default"
        )));
    };
    let t = text.trim();
    let unquoted = t
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .map(|s| s.replace("''", "'"));
    let json = match (p, &unquoted) {
        (PrimitiveType::String, Some(s)) => serde_json::Value::String(s.clone()),
        (PrimitiveType::Boolean, None) => match t.to_ascii_lowercase().as_str() {
            "true" => serde_json::Value::Bool(true),
            "false" => serde_json::Value::Bool(false),
            _ => return Err(Error::invalid(format!("'{t}' is not a boolean"))),
        },
        (PrimitiveType::Int | PrimitiveType::Long, None) => serde_json::Value::Number(
            t.parse::<i64>()
                .map_err(|_| Error::invalid(format!("'{t}' is not an integer")))?
                .into(),
        ),
        (PrimitiveType::Float | PrimitiveType::Double, None) => serde_json::Number::from_f64(
            t.parse::<f64>()
                .map_err(|_| Error::invalid(format!("'{t}' is not a number")))?,
        )
        .map(serde_json::Value::Number)
        .ok_or_else(|| Error::invalid(format!("'{t}' is not a finite number")))?,
        (PrimitiveType::Decimal { .. }, None) => serde_json::Value::String(t.to_string()),
        (_, Some(s)) => serde_json::Value::String(s.clone()),
        (other, None) => {
            return Err(Error::invalid(format!(
                "'{t}': a default for a {other} column is written quoted, in the spec's JSON form"
            )))
        }
    };
    Literal::try_from_json(json, ty)
        .map_err(|e| Error::invalid(format!("'{t}': {}", e.message())))?
        .ok_or_else(|| Error::invalid(format!("'{t}': a default cannot be null")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_alter_clause;

    fn table(ddl: &str, v: FormatVersion) -> TableMetadata {
        let schema = parse_schema(ddl).unwrap();
        let spec = parse_partition_spec("bucket(4, id)", &schema).unwrap();
        TableMetadataBuilder::new(
            schema,
            spec,
            SortOrder::unsorted_order(),
            "file:///t".into(),
            v,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn alter(md: &TableMetadata, clause: &str) -> Result<TableMetadata> {
        apply(md, &parse_alter_clause(clause).unwrap(), "db.t", None)
    }

    #[test]
    fn new_columns_take_ids_above_every_id_ever_used() {
        let md = table(
            "id long not null, v int, s struct<a:int, b:int>",
            FormatVersion::V2,
        );
        let last = md.last_column_id();
        let md = alter(&md, "DROP COLUMN s").unwrap();
        let md = alter(&md, "ADD COLUMN s struct<a:int> FIRST").unwrap();
        let s = md.current_schema().field_by_name("s").unwrap().clone();
        assert_eq!(s.id, last + 1);
        assert_eq!(
            md.current_schema().field_by_name("s.a").unwrap().id,
            last + 2
        );
        assert_eq!(md.current_schema().as_struct().fields()[0].name, "s");
        assert_eq!(md.last_column_id(), last + 2);
    }

    #[test]
    fn promotions_follow_the_spec_and_defaults_follow_the_type() {
        let md = table(
            "id long not null, v int, f float, d date, p decimal(9,2)",
            FormatVersion::V3,
        );
        let md = alter(&md, "ADD COLUMN w int DEFAULT 7").unwrap();
        let md = alter(&md, "ALTER COLUMN w TYPE long").unwrap();
        let w = md.current_schema().field_by_name("w").unwrap().clone();
        assert_eq!(w.initial_default, Some(Literal::long(7)));
        for ok in [
            "ALTER COLUMN v TYPE long",
            "ALTER COLUMN f TYPE double",
            "ALTER COLUMN p TYPE decimal(12,2)",
            "ALTER COLUMN d TYPE timestamp",
        ] {
            alter(&md, ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "ALTER COLUMN v TYPE string",
            "ALTER COLUMN p TYPE decimal(12,3)",
            "ALTER COLUMN p TYPE decimal(8,2)",
            "ALTER COLUMN id TYPE int",
        ] {
            assert!(alter(&md, bad).is_err(), "{bad}");
        }
        let v2 = table("id long not null, d date", FormatVersion::V2);
        assert!(alter(&v2, "ALTER COLUMN d TYPE timestamp").is_err());
    }

    #[test]
    fn a_keyed_tables_rule_is_fixed_and_checked_as_at_create() {
        // Keyed by its identifier field alone (no merge-engine property): the rule's
        // properties are refused whatever their value.
        let ddl = "id long not null, plan string, ver long, op string, n int";
        let keyed = alter(&table(ddl, FormatVersion::V2), "SET IDENTIFIER FIELDS id").unwrap();
        for bad in [
            "floe.merge.version-column'='nosuch",
            "floe.merge.version-column'='plan",
            "floe.merge.version-column'='ver",
            "floe.merge.delete-column'='op",
            "floe.merge-engine'='sum",
        ] {
            let e = alter(&keyed, &format!("SET TBLPROPERTIES ('{bad}')")).unwrap_err();
            assert!(
                e.to_string().contains("cannot be changed after create"),
                "{bad}: {e}"
            );
        }
        // Sink checkpoints and the tombstone list may be unset (recovery), a checkpoint set
        // to a number; the tombstone list is never set by hand.
        let with = alter(
            &keyed,
            "SET TBLPROPERTIES ('floe.sink.s1.checkpoint'='7', 'floe.tombstones'='{\"files\":[]}')",
        );
        assert!(with.unwrap_err().to_string().contains("only UNSET"));
        let with = alter(&keyed, "SET TBLPROPERTIES ('floe.sink.s1.checkpoint'='7')").unwrap();
        assert!(alter(&keyed, "SET TBLPROPERTIES ('floe.sink.s1.checkpoint'='x')").is_err());
        assert!(alter(&keyed, "SET TBLPROPERTIES ('floe.sink.a b.checkpoint'='1')").is_err());
        let gone = alter(&with, "UNSET TBLPROPERTIES ('floe.sink.s1.checkpoint')").unwrap();
        assert!(!gone.properties().contains_key("floe.sink.s1.checkpoint"));
        // A table whose rule an older floe let ALTER break: unrelated changes say how to
        // mend it, and the rule's property may be unset (or set to a valid column).
        let mut props = keyed.properties().clone();
        props.insert("floe.merge.version-column".into(), "nosuch".into());
        let broken = TableMetadataBuilder::new_from_metadata(keyed.clone(), None)
            .set_properties(props)
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        let e = alter(
            &broken,
            "SET TBLPROPERTIES ('write.target-file-size-bytes'='1000')",
        )
        .unwrap_err();
        assert!(e.to_string().contains("mend it first"), "{e}");
        let mended = alter(&broken, "UNSET TBLPROPERTIES ('floe.merge.version-column')").unwrap();
        KeyedSpec::of(&mended, "db.t").unwrap();
        let mended = alter(
            &broken,
            "SET TBLPROPERTIES ('floe.merge.version-column'='ver')",
        )
        .unwrap();
        assert_eq!(
            KeyedSpec::of(&mended, "db.t").unwrap().version.as_deref(),
            Some("ver")
        );
        // MERGE statement settings share the namespace but are not the rule.
        alter(
            &keyed,
            "SET TBLPROPERTIES ('floe.merge.partition-aligned'='false')",
        )
        .unwrap();
        // A table without a key cannot take a rule's property alone (as at create), but may
        // become keyed together with it.
        let plain = table(ddl, FormatVersion::V2);
        assert!(alter(
            &plain,
            "SET TBLPROPERTIES ('floe.merge.version-column'='ver')"
        )
        .is_err());
        // Renaming or dropping the version column would leave the rule naming nothing.
        let versioned = TableMetadataBuilder::new_from_metadata(keyed.clone(), None)
            .set_properties(HashMap::from([(
                "floe.merge.version-column".to_string(),
                "ver".to_string(),
            )]))
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        assert!(alter(&versioned, "DROP COLUMN ver").is_err());
        assert!(alter(&versioned, "RENAME COLUMN ver TO v2").is_err());
        alter(&versioned, "RENAME COLUMN plan TO tier").unwrap();
    }

    #[test]
    fn basis_names_what_a_concurrent_commit_changed() {
        let md = table("id long not null, v int", FormatVersion::V2);
        let changes = parse_alter_clause("ADD PARTITION FIELD v").unwrap();
        let basis = Basis::of(&md, &changes);
        let moved = alter(&md, "ADD PARTITION FIELD truncate(2, v)").unwrap();
        assert_eq!(basis.changed_in(&moved), Some("the partition spec"));
        let props = alter(&md, "SET TBLPROPERTIES ('a'='b')").unwrap();
        assert_eq!(basis.changed_in(&props), None);
    }
}
