//! Field ids the spec reserves for metadata columns (from `Integer.MAX_VALUE` down).

/// `file_path` of a position delete file.
pub const FILE_PATH_FIELD_ID: i32 = 2147483546;
/// `pos` of a position delete file.
pub const POS_FIELD_ID: i32 = 2147483545;
/// `_row_id` (row lineage, v3).
pub const ROW_ID_FIELD_ID: i32 = 2147483540;
/// `_last_updated_sequence_number` (row lineage, v3).
pub const LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID: i32 = 2147483539;
/// A row's position: the field a deletion vector blob applies to (`_pos`).
pub const ROW_POSITION_FIELD_ID: i32 = 2147483645;
