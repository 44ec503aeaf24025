//! The Puffin `deletion-vector-v1` blob: a 4-byte big-endian length of what follows up to
//! the checksum, the magic `D1 D3 39 64`, the deleted positions as a portable 64-bit Roaring
//! bitmap, and a big-endian CRC-32 of magic and bitmap.

use roaring::RoaringTreemap;

use crate::error::{Error, Result};

/// The blob type name in the Puffin footer.
pub const DELETION_VECTOR_V1: &str = "deletion-vector-v1";
/// The blob property naming the data file a deletion vector applies to.
pub const PROP_REFERENCED_DATA_FILE: &str = "referenced-data-file";
/// The blob property holding the number of deleted positions.
pub const PROP_CARDINALITY: &str = "cardinality";

const MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];
/// Positions above this are refused, as Iceberg Java and pyiceberg do.
const MAX_POSITION: u64 = ((i32::MAX as u64) << 32) | u32::MAX as u64;

/// Encodes deleted positions as a `deletion-vector-v1` blob.
pub fn encode(positions: &RoaringTreemap) -> Result<Vec<u8>> {
    if positions.max().is_some_and(|m| m > MAX_POSITION) {
        return Err(Error::invalid(
            "a deletion vector position is beyond the largest one the spec allows",
        ));
    }
    let size = positions.serialized_size();
    let mut out = Vec::with_capacity(size + 12);
    let len = u32::try_from(size + MAGIC.len())
        .map_err(|_| Error::invalid("deletion vector is larger than 4 GiB"))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&MAGIC);
    positions
        .serialize_into(&mut out)
        .map_err(|e| Error::invalid(format!("serializing deletion vector: {e}")))?;
    let crc = crc32fast::hash(&out[4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Decodes a `deletion-vector-v1` blob, checking its length, magic, checksum and (when given)
/// the cardinality recorded for it. `what` names the blob in errors.
pub fn decode(blob: &[u8], cardinality: Option<u64>, what: &str) -> Result<RoaringTreemap> {
    let bad = |m: String| Error::corrupt(format!("deletion vector {what}: {m}"));
    if blob.len() < 12 {
        return Err(bad(format!("{} bytes is too short", blob.len())));
    }
    let len = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    if len + 8 != blob.len() {
        return Err(bad(format!(
            "length field says {len} bytes but the blob holds {}",
            blob.len().saturating_sub(8)
        )));
    }
    if blob[4..8] != MAGIC {
        return Err(bad(format!(
            "bad magic {:02X?} (expected D1 D3 39 64)",
            &blob[4..8]
        )));
    }
    let body = &blob[4..4 + len];
    let stored = u32::from_be_bytes([blob[4 + len], blob[5 + len], blob[6 + len], blob[7 + len]]);
    let crc = crc32fast::hash(body);
    if crc != stored {
        return Err(bad(format!(
            "CRC-32 mismatch (stored {stored:08x}, computed {crc:08x})"
        )));
    }
    let bitmap = RoaringTreemap::deserialize_from(&body[4..])
        .map_err(|e| bad(format!("malformed bitmap: {e}")))?;
    if let Some(c) = cardinality {
        if bitmap.len() != c {
            return Err(bad(format!(
                "holds {} positions but its cardinality property says {c}",
                bitmap.len()
            )));
        }
    }
    Ok(bitmap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checks() {
        let mut p = RoaringTreemap::new();
        p.extend([0u64, 1, 7, 1 << 33, (1 << 33) + 5]);
        let blob = encode(&p).unwrap();
        assert_eq!(&blob[4..8], &MAGIC);
        assert_eq!(decode(&blob, Some(5), "t").unwrap(), p);
        assert!(decode(&blob, Some(4), "t")
            .unwrap_err()
            .to_string()
            .contains("cardinality"));
        let mut bad = blob.clone();
        bad[5] ^= 1;
        assert!(decode(&bad, None, "t")
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut bad = blob.clone();
        let n = bad.len();
        bad[n - 6] ^= 1;
        assert!(decode(&bad, None, "t")
            .unwrap_err()
            .to_string()
            .contains("CRC"));
        assert!(decode(&blob[..blob.len() - 1], None, "t").is_err());
    }

    #[test]
    fn refuses_positions_java_cannot_read() {
        let mut p = RoaringTreemap::new();
        p.insert(u64::MAX);
        assert!(encode(&p).is_err());
    }
}
