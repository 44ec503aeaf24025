//! Debezium JSON change events (placeholder filled below).
