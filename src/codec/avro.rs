//! Checks on an Avro container before its records are decoded: its writer schema, and how
//! far its compressed blocks expand.
//!
//! An array whose items encode in zero bytes (`null`, `fixed(0)`, a record of such fields)
//! lets a block declare millions of items that cost no input; nested, they multiply into
//! hours of decoding from a few bytes. No Iceberg schema has such an array, so a file whose
//! writer schema does is refused before any record is read.

use std::collections::HashMap;
use std::io::Read;

use apache_avro::schema::{Name, Schema};

use crate::error::{Error, Result};

/// Refuses `schema` (the writer schema of `what`) if its objects or an array's items encode
/// in zero bytes, or a record contains itself with nothing (a union, array or map) in between.
pub(crate) fn check_writer_schema(schema: &Schema, what: &str) -> Result<()> {
    let mut named = HashMap::new();
    collect_named(schema, &mut named);
    let mut sizes = Sizes {
        named,
        memo: HashMap::new(),
        cyclic: false,
    };
    let empty_items = sizes.has_zero_byte_items(schema);
    // A block may declare any number of objects: ones that take no bytes cost no input.
    let empty_objects = sizes.zero_bytes(schema);
    let found = if empty_items {
        "an array whose items take no bytes"
    } else if sizes.cyclic {
        "a record that contains itself"
    } else if empty_objects {
        "records that take no bytes"
    } else {
        return Ok(());
    };
    Err(Error::corrupt(format!(
        "{what} is malformed: its Avro schema has {found} (no Iceberg writer produces one)"
    )))
}

/// Named types by name. Nesting is bounded by the schema JSON parser's recursion limit.
fn collect_named<'a>(s: &'a Schema, out: &mut HashMap<&'a Name, &'a Schema>) {
    match s {
        Schema::Record(r) => {
            out.insert(&r.name, s);
            r.fields.iter().for_each(|f| collect_named(&f.schema, out));
        }
        Schema::Fixed(f) => {
            out.insert(&f.name, s);
        }
        Schema::Array(a) => collect_named(&a.items, out),
        Schema::Map(m) => collect_named(&m.types, out),
        Schema::Union(u) => u.variants().iter().for_each(|v| collect_named(v, out)),
        Schema::Decimal(d) => collect_named(&d.inner, out),
        _ => {}
    }
}

struct Sizes<'a> {
    named: HashMap<&'a Name, &'a Schema>,
    /// Per record: `None` while it is being sized, then whether it takes zero bytes.
    memo: HashMap<&'a Name, Option<bool>>,
    /// A record was reached again while being sized.
    cyclic: bool,
}

impl<'a> Sizes<'a> {
    /// Whether a value of `s` can encode in zero bytes.
    fn zero_bytes(&mut self, s: &'a Schema) -> bool {
        match s {
            Schema::Null => true,
            Schema::Fixed(f) => f.size == 0,
            Schema::Decimal(d) => self.zero_bytes(&d.inner),
            Schema::Record(r) => match self.memo.get(&r.name) {
                Some(Some(known)) => *known,
                Some(None) => {
                    self.cyclic = true;
                    true
                }
                None => {
                    self.memo.insert(&r.name, None);
                    let zero = r.fields.iter().all(|f| self.zero_bytes(&f.schema));
                    self.memo.insert(&r.name, Some(zero));
                    zero
                }
            },
            // An unknown name: the decoder fails on it anyway.
            Schema::Ref { name } => match self.named.get(name).copied() {
                Some(t) => self.zero_bytes(t),
                None => false,
            },
            _ => false,
        }
    }

    fn has_zero_byte_items(&mut self, s: &'a Schema) -> bool {
        match s {
            Schema::Array(a) => self.zero_bytes(&a.items) || self.has_zero_byte_items(&a.items),
            Schema::Map(m) => self.has_zero_byte_items(&m.types),
            Schema::Record(r) => {
                // Sizing the record finds a record that contains itself.
                self.zero_bytes(s);
                r.fields.iter().any(|f| self.has_zero_byte_items(&f.schema))
            }
            Schema::Union(u) => u.variants().iter().any(|v| self.has_zero_byte_items(v)),
            _ => false,
        }
    }
}

/// How far one compressed block may expand: `MAX_EXPANSION` times its compressed size, or
/// [`MIN_EXPANDED_BYTES`], whichever is larger. Iceberg's manifests and manifest lists
/// compress a few times over (paths, ids and bounds); deflate's own limit is about 1032:1.
pub(crate) const MAX_EXPANSION: u64 = 256;

/// Bytes any compressed block may expand to, whatever its size.
pub(crate) const MIN_EXPANDED_BYTES: u64 = 1 << 20;

/// Refuses an Avro container (`bytes`, the contents of `what`) whose header metadata map
/// declares more entries than its bytes could hold: apache-avro 0.21 reserves a map's
/// declared size before reading it, and up to its 8 Mi limit that is 1.3 GB for 2 KB of file.
/// Run before apache-avro opens the file.
pub(crate) fn check_header(bytes: &[u8], what: &str) -> Result<()> {
    let mut c = Cursor::new(bytes);
    c.header()
        .map(|_| ())
        .map_err(|why| Error::corrupt(format!("{what} is malformed: {why}")))
}

/// Refuses an Avro container (`bytes`, the contents of `what`, written with `schema`) whose
/// blocks do not hold what they declare:
/// - a compressed block that expands beyond [`MAX_EXPANSION`] (a few KB of deflate or zstd
///   can otherwise stand for megabytes to gigabytes of records);
/// - a block whose objects, walked by the schema, run past its end. apache-avro 0.21 reads a
///   boolean or a union at the end of a block as null, so an array of such records declared
///   millions long costs no input and seconds of decoding (fuzzing found it: a manifest list's
///   `partitions`).
///
/// A container this walk cannot follow (a bad header, a codec it does not know) is left to
/// the decoder, which reports it.
pub(crate) fn check_blocks(bytes: &[u8], schema: &Schema, what: &str) -> Result<()> {
    let bad = |why: String| Error::corrupt(format!("{what} is malformed: {why}"));
    let mut c = Cursor::new(bytes);
    let Some(codec) = c.header().map_err(bad)? else {
        return Ok(());
    };
    let mut named = HashMap::new();
    collect_named(schema, &mut named);
    while c.pos < bytes.len() {
        let (Some(count), Some(size)) = (c.long(), c.long()) else {
            return Ok(());
        };
        let Some(block) = usize::try_from(size).ok().and_then(|n| c.take(n)) else {
            return Ok(());
        };
        let limit = MIN_EXPANDED_BYTES.max(MAX_EXPANSION.saturating_mul(size as u64));
        let data = match inflate(&codec, block, limit) {
            Inflated::Data(d) => d,
            Inflated::TooLarge => {
                return Err(bad(format!(
                    "a {size}-byte {codec} block expands to more than {limit} bytes (over \
                     {MAX_EXPANSION} times its size; no Iceberg writer produces that)"
                )))
            }
            Inflated::Unreadable => return Ok(()),
        };
        let mut w = Walk {
            c: Cursor::new(&data),
            named: &named,
        };
        // Every object takes at least a byte (schemas whose objects take none are refused).
        if count < 0 || count as u64 > data.len() as u64 {
            return Err(bad(format!(
                "a block declares {count} objects in {} bytes",
                data.len()
            )));
        }
        for i in 0..count {
            w.value(schema)
                .map_err(|why| bad(format!("object {i} of a {count}-object block: {why}")))?;
        }
        if c.take(16).is_none() {
            return Ok(());
        }
    }
    Ok(())
}

/// One block of `codec` (of the container `what`) decompressed, bounded as
/// [`check_blocks`] bounds it: `Ok(None)` for a codec or stream not decompressible here.
pub(crate) fn inflate_block<'a>(
    codec: &str,
    block: &'a [u8],
    what: &str,
) -> Result<Option<std::borrow::Cow<'a, [u8]>>> {
    let limit = MIN_EXPANDED_BYTES.max(MAX_EXPANSION.saturating_mul(block.len() as u64));
    match inflate(codec, block, limit) {
        Inflated::Data(d) => Ok(Some(d)),
        Inflated::TooLarge => Err(Error::corrupt(format!(
            "{what} is malformed: a {}-byte {codec} block expands to more than {limit} bytes \
             (over {MAX_EXPANSION} times its size; no Iceberg writer produces that)",
            block.len()
        ))),
        Inflated::Unreadable => Ok(None),
    }
}

/// A block's data, decompressed.
enum Inflated<'a> {
    Data(std::borrow::Cow<'a, [u8]>),
    /// Over the limit.
    TooLarge,
    /// Not decompressible here (unknown codec, corrupt stream): the decoder reports it.
    Unreadable,
}

/// Decompresses one block of `codec`, up to `limit` bytes.
fn inflate<'a>(codec: &str, block: &'a [u8], limit: u64) -> Inflated<'a> {
    let bounded = |r: &mut dyn std::io::Read| {
        let mut out = Vec::new();
        match r.take(limit + 1).read_to_end(&mut out) {
            Ok(_) if out.len() as u64 > limit => Inflated::TooLarge,
            Ok(_) => Inflated::Data(out.into()),
            Err(_) => Inflated::Unreadable,
        }
    };
    match codec {
        "null" => Inflated::Data(block.into()),
        "deflate" => bounded(&mut flate2::read::DeflateDecoder::new(block)),
        "zstandard" => match zstd::stream::read::Decoder::new(block) {
            Ok(mut d) => bounded(&mut d),
            Err(_) => Inflated::Unreadable,
        },
        // Snappy states the length up front; a 4-byte CRC follows the data.
        "snappy" => {
            let body = &block[..block.len().saturating_sub(4)];
            match snap::raw::decompress_len(body) {
                Ok(n) if n as u64 > limit => Inflated::TooLarge,
                Ok(_) => match snap::raw::Decoder::new().decompress_vec(body) {
                    Ok(v) => Inflated::Data(v.into()),
                    Err(_) => Inflated::Unreadable,
                },
                Err(_) => Inflated::Unreadable,
            }
        }
        _ => Inflated::Unreadable,
    }
}

/// Walks values of a schema over a block's bytes, allocating nothing.
struct Walk<'a> {
    c: Cursor<'a>,
    named: &'a HashMap<&'a Name, &'a Schema>,
}

impl Walk<'_> {
    fn left(&self) -> u64 {
        (self.c.buf.len() - self.c.pos) as u64
    }

    fn skip(&mut self, n: u64) -> std::result::Result<(), String> {
        let left = self.left();
        usize::try_from(n)
            .ok()
            .and_then(|n| self.c.take(n))
            .map(|_| ())
            .ok_or_else(|| format!("{n} bytes declared where {left} remain"))
    }

    fn long(&mut self) -> std::result::Result<i64, String> {
        self.c
            .long()
            .ok_or_else(|| "the block ends inside a number, or a number runs past 10 bytes".into())
    }

    fn len(&mut self) -> std::result::Result<u64, String> {
        let n = self.long()?;
        u64::try_from(n).map_err(|_| format!("a negative length {n}"))
    }

    /// The items of an array or map: blocks of counts, each item at least a byte.
    fn items(
        &mut self,
        mut item: impl FnMut(&mut Self) -> std::result::Result<(), String>,
    ) -> std::result::Result<(), String> {
        loop {
            let mut n = self.long()?;
            if n == 0 {
                return Ok(());
            }
            if n < 0 {
                n = n.checked_neg().ok_or("an impossible item count")?;
                self.long()?;
            }
            let left = self.left();
            if n as u64 > left {
                return Err(format!("{n} items declared where {left} bytes remain"));
            }
            for _ in 0..n {
                item(self)?;
            }
        }
    }

    fn value(&mut self, s: &Schema) -> std::result::Result<(), String> {
        match s {
            Schema::Null => Ok(()),
            Schema::Boolean => self.skip(1),
            Schema::Int
            | Schema::Long
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos
            | Schema::Enum(_) => self.long().map(|_| ()),
            Schema::Float => self.skip(4),
            Schema::Double => self.skip(8),
            Schema::Duration => self.skip(12),
            Schema::Bytes | Schema::String | Schema::Uuid | Schema::BigDecimal => {
                let n = self.len()?;
                self.skip(n)
            }
            Schema::Fixed(f) => self.skip(f.size as u64),
            Schema::Decimal(d) => self.value(&d.inner),
            Schema::Array(a) => self.items(|w| w.value(&a.items)),
            Schema::Map(m) => self.items(|w| {
                let n = w.len()?;
                w.skip(n)?;
                w.value(&m.types)
            }),
            Schema::Union(u) => {
                let i = self.long()?;
                let v = usize::try_from(i)
                    .ok()
                    .and_then(|i| u.variants().get(i))
                    .ok_or_else(|| format!("union branch {i} of {}", u.variants().len()))?;
                self.value(v)
            }
            Schema::Record(r) => r.fields.iter().try_for_each(|f| self.value(&f.schema)),
            Schema::Ref { name } => match self.named.get(name).copied() {
                Some(t) => self.value(t),
                None => Err(format!("unknown type {name:?}")),
            },
        }
    }
}

/// A cursor over an Avro object container file or a block's bytes.
#[derive(Clone, Copy)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Bytes not read yet.
    pub(crate) fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Some(s)
    }

    /// A zig-zag varint long.
    pub(crate) fn long(&mut self) -> Option<i64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.take(1)?.first()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some((v >> 1) as i64 ^ -((v & 1) as i64));
            }
        }
        None
    }

    pub(crate) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.long()?).ok()?;
        self.take(n)
    }

    /// Reads the header (magic, metadata map, sync marker): its codec, `Err` for a map that
    /// declares more entries than the bytes left could hold (apache-avro would reserve room
    /// for them first), `Ok(None)` for a header this walk cannot follow.
    pub(crate) fn header(&mut self) -> std::result::Result<Option<String>, String> {
        if self.take(4) != Some(b"Obj\x01") {
            return Ok(None);
        }
        let mut codec = "null".to_string();
        loop {
            let Some(mut n) = self.long() else {
                return Ok(None);
            };
            if n == 0 {
                break;
            }
            if n < 0 {
                n = n.checked_neg().unwrap_or(i64::MAX);
                if self.long().is_none() {
                    return Ok(None);
                }
            }
            // An entry is a key and a value, each at least its length byte.
            let left = (self.buf.len() - self.pos) as u64;
            if (n as u64).saturating_mul(2) > left {
                return Err(format!(
                    "its header declares {n} metadata entries with {left} bytes left"
                ));
            }
            for _ in 0..n {
                let (Some(k), Some(v)) = (self.bytes(), self.bytes()) else {
                    return Ok(None);
                };
                if k == b"avro.codec" {
                    codec = String::from_utf8_lossy(v).into_owned();
                }
            }
        }
        Ok(self.take(16).map(|_| codec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<()> {
        check_writer_schema(&Schema::parse_str(json).unwrap(), "test.avro")
    }

    #[test]
    fn iceberg_like_schemas_pass() {
        check(
            r#"{"type":"record","name":"manifest_file","fields":[
                {"name":"path","type":"string"},
                {"name":"partitions","type":["null",{"type":"array","items":
                    {"type":"record","name":"r508","fields":[
                        {"name":"contains_null","type":"boolean"},
                        {"name":"lower_bound","type":["null","bytes"]}]}}]}]}"#,
        )
        .unwrap();
        check(r#"{"type":"array","items":{"type":"fixed","name":"f","size":4}}"#).unwrap();
    }

    #[test]
    fn arrays_of_nothing_are_refused() {
        for json in [
            r#"{"type":"array","items":"null"}"#,
            r#"{"type":"array","items":{"type":"fixed","name":"z","size":0}}"#,
            r#"{"type":"record","name":"r","fields":[{"name":"a","type":{"type":"array",
                "items":{"type":"record","name":"e","fields":[{"name":"n","type":"null"}]}}}]}"#,
            r#"{"type":"map","values":{"type":"array","items":{"type":"array","items":"null"}}}"#,
        ] {
            let e = check(json).unwrap_err();
            assert!(e.to_string().contains("items take no bytes"), "{json}: {e}");
        }
    }

    #[test]
    fn objects_of_nothing_are_refused() {
        // Found by the fuzzer (manifest-list, long run): a mutated manifest_file schema whose
        // fields are all null, and a block declaring i64::MAX objects in 173 bytes.
        for json in [
            r#""null""#,
            r#"{"type":"record","name":"manifest_file","fields":[{"name":"a","type":"null"},
                {"name":"b","type":{"type":"fixed","name":"f","size":0}}]}"#,
        ] {
            let e = check(json).unwrap_err();
            assert!(
                e.to_string().contains("records that take no bytes"),
                "{json}: {e}"
            );
        }
    }

    #[test]
    fn records_that_contain_themselves_are_refused() {
        let e = check(r#"{"type":"record","name":"r","fields":[{"name":"a","type":"r"}]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("contains itself"), "{e}");
        // Through a union it is a finite linked list.
        check(r#"{"type":"record","name":"r","fields":[{"name":"a","type":["null","r"]}]}"#)
            .unwrap();
    }

    /// `r { b: boolean, a: array<s { u: union{null, boolean} }> }`: a manifest list's
    /// `partitions` in small.
    const SUMMARIES: &str = r#"{"type":"record","name":"r","fields":[
        {"name":"b","type":"boolean"},
        {"name":"a","type":{"type":"array","items":{"type":"record","name":"s",
            "fields":[{"name":"u","type":["null","boolean"]}]}}}]}"#;

    fn long(v: &mut Vec<u8>, x: i64) {
        let mut z = ((x << 1) ^ (x >> 63)) as u64;
        loop {
            if z < 0x80 {
                v.push(z as u8);
                return;
            }
            v.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
    }

    /// An Avro container of `schema` with one block of `count` objects in `data` (`codec`).
    fn container(schema: &str, codec: &str, count: i64, data: &[u8]) -> Vec<u8> {
        let mut v = b"Obj\x01".to_vec();
        long(&mut v, 2);
        for (k, val) in [("avro.schema", schema), ("avro.codec", codec)] {
            long(&mut v, k.len() as i64);
            v.extend_from_slice(k.as_bytes());
            long(&mut v, val.len() as i64);
            v.extend_from_slice(val.as_bytes());
        }
        long(&mut v, 0);
        v.extend_from_slice(&[7; 16]);
        long(&mut v, count);
        long(&mut v, data.len() as i64);
        v.extend_from_slice(data);
        v.extend_from_slice(&[7; 16]);
        v
    }

    fn deflate(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn blocks(schema: &str, codec: &str, count: i64, data: &[u8]) -> Result<()> {
        let file = container(schema, codec, count, data);
        check_blocks(
            &file,
            &Schema::parse_str(schema).unwrap(),
            "manifest list 'm'",
        )
    }

    #[test]
    fn blocks_that_expand_a_thousandfold_are_refused() {
        // 4 MiB in about 4 KB of deflate, 64 MiB in a few KB of zstd.
        let e = blocks(r#""bytes""#, "deflate", 1, &deflate(&vec![0; 4 << 20])).unwrap_err();
        assert!(e.to_string().contains("expands to more than"), "{e}");
        let z = zstd::encode_all(&vec![0u8; 64 << 20][..], 3).unwrap();
        assert!(blocks(r#""bytes""#, "zstandard", 1, &z).is_err());
        // Ordinary ratios, and blocks under the floor, pass.
        let text: Vec<u8> = (0..200_000u32)
            .map(|i| {
                format!(
                    "s3://b/t/data/{:08x}-{i}.parquet",
                    i.wrapping_mul(2654435761)
                )
            })
            .flat_map(|p| {
                let mut v = Vec::new();
                long(&mut v, p.len() as i64);
                v.extend_from_slice(p.as_bytes());
                v
            })
            .collect();
        assert!(blocks(r#""string""#, "deflate", 200_000, &deflate(&text)).is_ok());
        let mut small = Vec::new();
        long(&mut small, 1 << 19);
        small.extend_from_slice(&vec![0; 1 << 19]);
        assert!(blocks(r#""bytes""#, "deflate", 1, &deflate(&small)).is_ok());
        // What the walk cannot follow is the decoder's to report.
        assert!(check_blocks(b"garbage", &Schema::Null, "m").is_ok());
    }

    #[test]
    fn header_maps_longer_than_the_file_are_refused() {
        // Found by the fuzzer (manifest-list, third long run, case 36380): 8 Mi entries
        // declared in a 2 KB file; apache-avro reserved 1.36 GB for them.
        let mut v = b"Obj\x01".to_vec();
        long(&mut v, (8 << 20) - 1);
        v.extend_from_slice(&[0; 100]);
        let e = check_header(&v, "manifest list 'm'").unwrap_err();
        assert!(e.to_string().contains("metadata entries"), "{e}");
        assert!(check_header(&container(SUMMARIES, "null", 0, &[]), "m").is_ok());
    }

    #[test]
    fn objects_that_run_past_their_block_are_refused() {
        // Two summaries, one null and one `true`: fine.
        let mut ok = vec![1];
        long(&mut ok, 2);
        ok.extend_from_slice(&[0, 2, 1, 0]);
        assert!(blocks(SUMMARIES, "null", 1, &ok).is_ok());
        assert!(blocks(SUMMARIES, "deflate", 1, &deflate(&ok)).is_ok());
        // A million summaries declared in no bytes (apache-avro would make them all null).
        let mut bomb = vec![1];
        long(&mut bomb, 1 << 20);
        let e = blocks(SUMMARIES, "null", 1, &bomb).unwrap_err();
        assert!(
            e.to_string()
                .contains("items declared where 0 bytes remain"),
            "{e}"
        );
        // More objects than bytes, a string longer than the block, a union branch too far.
        assert!(blocks(SUMMARIES, "null", 9, &ok).is_err());
        let mut long_string = Vec::new();
        long(&mut long_string, 1000);
        long_string.extend_from_slice(b"abc");
        assert!(blocks(r#""string""#, "null", 1, &long_string).is_err());
        assert!(blocks(r#"["null","int"]"#, "null", 1, &[4]).is_err());
    }
}
