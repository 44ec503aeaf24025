#!/usr/bin/env python3
"""MERGE / upsert source for floe's row-level-change benchmark (benches/dml.rs).

    python tools/bench/gen_dml_source.py DATA_DIR OUT.parquet [--every 20] [--offset 3] [--force]

DATA_DIR holds the gen_data.py files (all *.parquet; ids are 0..rows-1). Writes one
Parquet file (zstd level 1, same schema as the data) with 2 * (rows / every) rows:

  * updates: every row with id % every == offset (rows/every rows, spread evenly over
    every data file), with changed non-key values: k = k + 1, a = a + 1.0,
    s1 = "u" + s1 (pyiceberg's upsert only rewrites rows whose values changed);
  * inserts: the same number of rows with new ids rows, rows+1, ... (other columns
    copied from the update rows).

Updates come first, then inserts. For the default 10M-row data set: 500,000 updates +
500,000 inserts = 1,000,000 rows. Idempotent: an existing OUT with the expected row
count is kept (unless --force). Prints one JSON object on stdout:

    {"path", "rows", "updates", "inserts", "bytes", "generated", "seconds"}
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--offset", type=int, default=3)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    files = sorted(glob.glob(os.path.join(args.data, "*.parquet")))
    if not files:
        ap.error(f"no *.parquet in {args.data}")
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    updates = len(range(args.offset, rows, args.every))
    expected = 2 * updates
    out = os.path.abspath(args.out)
    if not args.force and os.path.exists(out):
        try:
            if pq.ParquetFile(out).metadata.num_rows == expected:
                print(json.dumps({"path": out, "rows": expected, "updates": updates, "inserts": updates,
                                  "bytes": os.path.getsize(out), "generated": False,
                                  "seconds": round(time.perf_counter() - t0, 4)}))
                return 0
        except Exception:  # noqa: BLE001 - unreadable: regenerate
            pass

    parts = []
    for f in files:
        t = pq.read_table(f)
        # id % every == offset, with integer arithmetic only (pyarrow has no modulo kernel):
        q = pc.divide(t["id"], pa.scalar(args.every, pa.int64()))
        rem = pc.subtract(t["id"], pc.multiply(q, pa.scalar(args.every, pa.int64())))
        parts.append(t.filter(pc.equal(rem, pa.scalar(args.offset, pa.int64()))))
    upd = pa.concat_tables(parts).combine_chunks()
    if upd.num_rows != updates:
        raise SystemExit(f"selected {upd.num_rows} update rows, expected {updates}")
    schema = upd.schema
    upd = upd.set_column(schema.get_field_index("k"), schema.field("k"),
                         pc.add(upd["k"], pa.scalar(1, pa.int64())))
    upd = upd.set_column(schema.get_field_index("a"), schema.field("a"),
                         pc.add(upd["a"], pa.scalar(1.0, pa.float64())))
    upd = upd.set_column(schema.get_field_index("s1"), schema.field("s1"),
                         pc.binary_join_element_wise(pa.scalar("u"), upd["s1"], ""))
    ins = upd.set_column(schema.get_field_index("id"), schema.field("id"),
                         pa.array(range(rows, rows + updates), pa.int64()))
    src = pa.concat_tables([upd, ins]).combine_chunks()
    tmp = out + ".tmp"
    os.makedirs(os.path.dirname(out), exist_ok=True)
    pq.write_table(src, tmp, compression="zstd", compression_level=1)
    os.replace(tmp, out)
    print(json.dumps({"path": out, "rows": src.num_rows, "updates": updates, "inserts": updates,
                      "bytes": os.path.getsize(out), "generated": True,
                      "seconds": round(time.perf_counter() - t0, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
