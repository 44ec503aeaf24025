#!/usr/bin/env python3
"""Deterministic benchmark data set for floe's append/scan benchmark.

    python tools/bench/gen_data.py OUT_DIR [--rows 10000000] [--files 2] [--seed 42]
                                           [--chunk-rows 1048576] [--force]

Writes OUT_DIR/part-00000.parquet ... part-<files-1>.parquet (Parquet, zstd level 1,
one row group per chunk) and prints one JSON object on stdout:

    {"files": [abs paths...], "rows": N, "bytes": total file bytes,
     "generated": true|false, "seconds": wall time, "seed": S, "schema": [...]}

Schema (all columns optional/nullable in Arrow and Parquet, but no value is null):

    id  int64          sequential 0..rows-1 across all files (file order)
    k   int64          uniform in [0, 1_000_000)
    a   float64        uniform in [0, 1000)
    b   float64        uniform in [-1, 1)
    s1  string         random alphanumeric, 9..15 chars (mean 12), ~unique
    s2  string         one of 100 distinct values, uniform
    ts  timestamp[us]  NO time zone (Iceberg `timestamp`, not `timestamptz`), uniform
                       over the 30 days [2024-01-01, 2024-01-31) in random row order
    d   date32         an independent uniform date in [2024-01-01, 2024-01-31)

Every value is a pure function of (seed, column, row index): a splitmix64 hash
evaluated with pyarrow.compute (wrapping uint64 arithmetic), so the output is
identical across runs, chunk sizes and machines, and needs nothing but pyarrow
(the peers venv has no numpy). Memory stays bounded by --chunk-rows.

Idempotent: when every expected file already exists with the expected row count
and schema, nothing is written (generated=false). Stray part-*.parquet files of
another --files layout in OUT_DIR are removed so that readers of the directory
see exactly this data set.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
EPOCH_DAY0 = dt.date(2024, 1, 1)
DAYS = 30
US_PER_DAY = 86_400 * 1_000_000

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("k", pa.int64()),
        pa.field("a", pa.float64()),
        pa.field("b", pa.float64()),
        pa.field("s1", pa.string()),
        pa.field("s2", pa.string()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("d", pa.date32()),
    ]
)

# Stream numbers: one independent hash stream per use.
STREAM_K, STREAM_A, STREAM_B, STREAM_S1, STREAM_S2, STREAM_TS, STREAM_D = range(1, 8)

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def splitmix64_int(x: int) -> int:
    """Scalar splitmix64 finaliser (pure Python, used for the small lookup tables)."""
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _u64(v: int) -> pa.Scalar:
    return pa.scalar(v & MASK64, pa.uint64())


def hash_stream(rows_u64: pa.Array, seed: int, stream: int) -> pa.Array:
    """splitmix64(row * GOLDEN + key(seed, stream)) for a uint64 array of row indices.

    pyarrow's add/multiply (non-_checked) wrap on overflow, which is exactly
    the modular uint64 arithmetic splitmix64 needs."""
    key = splitmix64_int((seed << 8) ^ stream)
    z = pc.add(pc.multiply(rows_u64, _u64(GOLDEN)), _u64(key))
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _u64(30))), _u64(0xBF58476D1CE4E5B9))
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _u64(27))), _u64(0x94D049BB133111EB))
    return pc.bit_wise_xor(z, pc.shift_right(z, _u64(31)))


def uniform_below(h: pa.Array, n: int) -> pa.Array:
    """Map a uint64 hash to [0, n) with the multiply-high trick on its top 32 bits (n < 2**32)."""
    assert 0 < n < (1 << 32)
    hi = pc.shift_right(h, _u64(32))
    return pc.shift_right(pc.multiply(hi, _u64(n)), _u64(32))


def unit_float(h: pa.Array) -> pa.Array:
    """Map a uint64 hash to a float64 in [0, 1) using its top 53 bits."""
    top = pc.cast(pc.shift_right(h, _u64(11)), pa.float64())
    return pc.multiply(top, pa.scalar(2.0 ** -53))


def fragment_table(seed: int) -> pa.Array:
    """4096 alphanumeric fragments of length 3, 4 or 5 (uniform), deterministic in seed."""
    out = []
    for i in range(4096):
        h = splitmix64_int((seed << 20) ^ (0xF00000 + i))
        length = 3 + (h % 3)
        h >>= 8
        chars = []
        for _ in range(length):
            chars.append(ALPHABET[h % len(ALPHABET)])
            h //= len(ALPHABET)
        out.append("".join(chars))
    return pa.array(out, pa.string())


def s2_values(seed: int) -> pa.Array:
    """100 distinct category strings (6..14 chars)."""
    out = []
    for i in range(100):
        h = splitmix64_int((seed << 20) ^ (0xE00000 + i))
        stem_len = 2 + (h % 9)
        h >>= 8
        stem = "".join(ALPHABET[(h >> (6 * j)) % 26] for j in range(stem_len))
        out.append(f"{stem}_{i:03d}")  # the suffix keeps the 100 values distinct
    assert len(set(out)) == 100
    return pa.array(out, pa.string())


def make_chunk(start: int, n: int, seed: int, frags: pa.Array, cats: pa.Array) -> pa.Table:
    rows = pc.add(pc.cast(_arange(n), pa.uint64()), _u64(start))
    ident = pc.cast(rows, pa.int64())

    k = pc.cast(uniform_below(hash_stream(rows, seed, STREAM_K), 1_000_000), pa.int64())
    a = pc.multiply(unit_float(hash_stream(rows, seed, STREAM_A)), pa.scalar(1000.0))
    b = pc.subtract(pc.multiply(unit_float(hash_stream(rows, seed, STREAM_B)), pa.scalar(2.0)), pa.scalar(1.0))

    # s1: three fragments (3-5 chars each) picked by 12-bit slices of one hash.
    h = hash_stream(rows, seed, STREAM_S1)
    parts = []
    for shift in (0, 12, 24):
        idx = pc.bit_wise_and(pc.shift_right(h, _u64(shift)), _u64(4095))
        parts.append(frags.take(idx))
    s1 = pc.binary_join_element_wise(*parts, "")

    s2 = cats.take(uniform_below(hash_stream(rows, seed, STREAM_S2), 100))

    # Spread over 30 days: whole seconds from the top 32 bits, microseconds from
    # the low 32 bits of one hash (multiply-high keeps everything in uint64).
    h = hash_stream(rows, seed, STREAM_TS)
    secs = uniform_below(h, DAYS * 86_400)
    micros = pc.shift_right(pc.multiply(pc.bit_wise_and(h, _u64(0xFFFFFFFF)), _u64(1_000_000)), _u64(32))
    base_us = (EPOCH_DAY0 - dt.date(1970, 1, 1)).days * US_PER_DAY
    ts_us = pc.add(pc.multiply(pc.cast(secs, pa.int64()), pa.scalar(1_000_000, pa.int64())), pc.cast(micros, pa.int64()))
    ts = pc.cast(pc.add(ts_us, pa.scalar(base_us, pa.int64())), pa.timestamp("us"))

    base_day = (EPOCH_DAY0 - dt.date(1970, 1, 1)).days
    d_off = pc.cast(uniform_below(hash_stream(rows, seed, STREAM_D), DAYS), pa.int32())
    d = pc.cast(pc.add(d_off, pa.scalar(base_day, pa.int32())), pa.date32())

    return pa.Table.from_arrays([ident, k, a, b, s1, s2, ts, d], schema=SCHEMA)


_ARANGE_CACHE: dict[int, pa.Array] = {}


def _arange(n: int) -> pa.Array:
    """0..n-1 as int64 without numpy (cached per length)."""
    arr = _ARANGE_CACHE.get(n)
    if arr is None:
        arr = pa.array(range(n), pa.int64())
        _ARANGE_CACHE.clear()
        _ARANGE_CACHE[n] = arr
    return arr


def expected_layout(rows: int, files: int) -> list[tuple[int, int]]:
    """(start_row, row_count) per file; the first rows % files files get one extra row."""
    base, extra = divmod(rows, files)
    out, start = [], 0
    for i in range(files):
        n = base + (1 if i < extra else 0)
        out.append((start, n))
        start += n
    return out


def file_ok(path: str, nrows: int) -> bool:
    try:
        md = pq.read_metadata(path)
        return md.num_rows == nrows and md.schema.to_arrow_schema().remove_metadata().equals(SCHEMA)
    except Exception:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--chunk-rows", type=int, default=1 << 20, help="rows generated per step = Parquet row group size")
    ap.add_argument("--force", action="store_true", help="regenerate even if the files look complete")
    args = ap.parse_args(argv)
    if args.rows < 1 or args.files < 1 or args.files > args.rows or args.chunk_rows < 1:
        ap.error("need rows >= files >= 1 and chunk-rows >= 1")

    t0 = time.perf_counter()
    out_dir = os.path.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    layout = expected_layout(args.rows, args.files)
    paths = [os.path.join(out_dir, f"part-{i:05d}.parquet") for i in range(args.files)]

    # Drop stale files of another layout (ours only: part-NNNNN.parquet).
    for p in glob.glob(os.path.join(out_dir, "part-*.parquet")):
        if p not in paths:
            os.remove(p)

    frags = fragment_table(args.seed)
    cats = s2_values(args.seed)
    generated = False
    for path, (start, nrows) in zip(paths, layout):
        if not args.force and file_ok(path, nrows):
            continue
        generated = True
        tmp = path + ".tmp"
        with pq.ParquetWriter(tmp, SCHEMA, compression="zstd", compression_level=1) as w:
            done = 0
            while done < nrows:
                n = min(args.chunk_rows, nrows - done)
                w.write_table(make_chunk(start + done, n, args.seed, frags, cats), row_group_size=n)
                done += n
        os.replace(tmp, path)
        print(f"[gen_data] wrote {path} ({nrows} rows)", file=sys.stderr)

    out = {
        "files": paths,
        "rows": args.rows,
        "bytes": sum(os.path.getsize(p) for p in paths),
        "generated": generated,
        "seconds": round(time.perf_counter() - t0, 3),
        "seed": args.seed,
        "schema": [f"{f.name}:{f.type}" for f in SCHEMA],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
