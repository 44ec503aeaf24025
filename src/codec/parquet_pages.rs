//! A bounded walk over the page headers of a Parquet column chunk, run before the parquet
//! crate decodes a file floe did not write itself.
//!
//! Page headers are Thrift compact-protocol structs. parquet 58 skips unknown fields of a
//! corrupt header without checking the declared element counts against the bytes left, so a
//! few hundred bytes can keep it busy for minutes (fuzzing found one at 27 s). This walk
//! accepts a header only if every declared count and length fits in the bytes that remain
//! (each element of a list or map takes at least one byte) and nesting stays within
//! [`MAX_DEPTH`], and then follows `compressed_page_size` to the next header.

/// Deepest struct/list nesting a page header may use (the headers parquet-format defines
/// nest four levels).
pub(crate) const MAX_DEPTH: usize = 32;

/// Why a column chunk's pages were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageError(pub String);

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn byte(&mut self) -> Result<u8, PageError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| PageError(format!("page header cut off at byte {}", self.pos)))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, PageError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(PageError(format!("varint too long at byte {}", self.pos)))
    }

    fn skip(&mut self, n: u64) -> Result<(), PageError> {
        if n > self.left() as u64 {
            return Err(PageError(format!(
                "page header declares {n} bytes at byte {} with {} left",
                self.pos,
                self.left()
            )));
        }
        self.pos += n as usize;
        Ok(())
    }

    /// Checks a declared element count: each element takes at least `min` bytes.
    fn count(&self, n: u64, min: u64) -> Result<u64, PageError> {
        if n.saturating_mul(min) > self.left() as u64 {
            return Err(PageError(format!(
                "page header declares {n} elements at byte {} with {} bytes left",
                self.pos,
                self.left()
            )));
        }
        Ok(n)
    }

    /// Skips one value of compact type `ty` (`in_list`: booleans take a byte).
    fn value(&mut self, ty: u8, depth: usize, in_list: bool) -> Result<(), PageError> {
        match ty {
            1 | 2 if !in_list => Ok(()),
            1..=3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                let elem = h & 0x0f;
                for _ in 0..self.count(n, 1)? {
                    self.nested(elem, depth, true)?;
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                for _ in 0..self.count(n, 2)? {
                    self.nested(kv >> 4, depth, true)?;
                    self.nested(kv & 0x0f, depth, true)?;
                }
                Ok(())
            }
            12 => self.structure(depth + 1).map(|_| ()),
            13 => self.skip(16),
            t => Err(PageError(format!(
                "unknown Thrift type {t} at byte {}",
                self.pos
            ))),
        }
    }

    fn nested(&mut self, ty: u8, depth: usize, in_list: bool) -> Result<(), PageError> {
        if depth >= MAX_DEPTH {
            return Err(PageError(format!(
                "page header nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.value(ty, depth + 1, in_list)
    }

    /// Walks a struct to its stop byte; returns the i32 field `want` (if present, at the top).
    fn structure(&mut self, depth: usize) -> Result<Option<i64>, PageError> {
        if depth > MAX_DEPTH {
            return Err(PageError(format!(
                "page header nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let mut last_id: i64 = 0;
        let mut compressed_size = None;
        loop {
            let h = self.byte()?;
            let ty = h & 0x0f;
            if ty == 0 {
                return Ok(compressed_size);
            }
            let id = match h >> 4 {
                0 => {
                    let z = self.varint()?;
                    ((z >> 1) as i64) ^ -((z & 1) as i64)
                }
                d => last_id + i64::from(d),
            };
            last_id = id;
            if depth == 0 && id == 3 && ty == 5 {
                let z = self.varint()?;
                compressed_size = Some(((z >> 1) as i64) ^ -((z & 1) as i64));
            } else {
                self.value(ty, depth, false)?;
            }
        }
    }
}

/// Walks the pages of one column chunk (`chunk`: its bytes, from its first page header to
/// `total_compressed_size`); returns how many pages it holds.
pub(crate) fn check_column_chunk(chunk: &[u8]) -> Result<usize, PageError> {
    let mut c = Cursor { buf: chunk, pos: 0 };
    let mut pages = 0;
    while c.left() > 0 {
        let start = c.pos;
        let size = c.structure(0)?.ok_or_else(|| {
            PageError(format!(
                "page header at byte {start} has no compressed_page_size"
            ))
        })?;
        if size < 0 {
            return Err(PageError(format!(
                "page at byte {start} declares a negative size {size}"
            )));
        }
        c.skip(size as u64)?;
        pages += 1;
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact-protocol page header: type (1), sizes (2, 3), then `extra` fields.
    fn header(compressed: i32, extra: &[u8]) -> Vec<u8> {
        let zz = |v: i32| ((v << 1) ^ (v >> 31)) as u32;
        let mut v = Vec::new();
        let varint = |v: &mut Vec<u8>, mut x: u32| loop {
            if x < 0x80 {
                v.push(x as u8);
                break;
            }
            v.push((x as u8 & 0x7f) | 0x80);
            x >>= 7;
        };
        v.push(0x15); // field 1, i32
        varint(&mut v, zz(0));
        v.push(0x15); // field 2, i32
        varint(&mut v, zz(compressed));
        v.push(0x15); // field 3, i32
        varint(&mut v, zz(compressed));
        v.extend_from_slice(extra);
        v.push(0);
        v
    }

    #[test]
    fn follows_pages_to_the_end_of_the_chunk() {
        let mut chunk = header(5, &[]);
        chunk.extend_from_slice(&[9; 5]);
        chunk.extend(header(2, &[0x1c, 0x15, 0x04, 0x00])); // field 4: struct { i32 }
        chunk.extend_from_slice(&[9; 2]);
        assert_eq!(check_column_chunk(&chunk), Ok(2));
    }

    #[test]
    fn refuses_counts_the_bytes_cannot_hold() {
        // Field 4: a list of 2^31 binaries, in a header of a dozen bytes.
        let list = [0x19, 0xf8, 0x80, 0x80, 0x80, 0x80, 0x08];
        let e = check_column_chunk(&header(0, &list)).unwrap_err();
        assert!(e.0.contains("elements"), "{e:?}");
        // A binary longer than the chunk.
        let bin = [0x18, 0xff, 0xff, 0x03];
        assert!(check_column_chunk(&header(0, &bin)).is_err());
        // A page longer than the chunk, a header cut short.
        let mut chunk = header(100, &[]);
        chunk.extend_from_slice(&[0; 10]);
        assert!(check_column_chunk(&chunk).is_err());
        assert!(check_column_chunk(&header(0, &[])[..4]).is_err());
    }

    #[test]
    fn refuses_deep_nesting() {
        let deep = vec![0x1c; 100]; // field +1, struct, nested 100 deep
        let e = check_column_chunk(&header(0, &deep)).unwrap_err();
        assert!(e.0.contains("deeper") || e.0.contains("cut off"), "{e:?}");
    }
}
