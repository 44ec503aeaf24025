"""The soak benchmark's baseline: the same kind of stream through pyiceberg 0.12.

A table of --rows rows (id long, v string, ver long) in a SqlCatalog, then batches of
--changes changes (65% updates, 20% inserts, 10% deletes; late replays are left out: pyiceberg
has no version rule) applied as `Table.upsert` + `Table.delete` per batch, no maintenance,
until --seconds have passed. Prints one JSON object: commits, commit p50 of the first and last
quarter, and a full scan's time before and after.

    python tools/bench/soak_pyiceberg.py --work DIR --rows 1000000 --changes 1000 --seconds 120
"""

import argparse
import json
import os
import random
import sys
import time

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In


def log(msg: str) -> None:
    print(f"[soak-pyiceberg] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--seconds", type=float, default=120.0)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cat = SqlCatalog(
        "soak",
        uri=f"sqlite:///{a.work}/catalog.db",
        warehouse=f"file://{a.work}",
    )
    cat.create_namespace("db")
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("ver", pa.int64())]
    )
    t = cat.create_table("db.soak", schema=schema)
    t.append(
        pa.table(
            {
                "id": pa.array(range(a.rows), pa.int64()),
                "v": pa.array([f"r{i}" for i in range(a.rows)]),
                "ver": pa.array([1] * a.rows, pa.int64()),
            },
            schema=schema,
        )
    )

    def scan_s() -> float:
        s = time.perf_counter()
        t.refresh().scan().to_arrow()
        return time.perf_counter() - s

    scan_first = scan_s()
    rng = random.Random(7)
    live = set(range(a.rows))
    live_list = list(live)
    next_key, ver = a.rows, 1
    lat = []
    started = time.perf_counter()
    while time.perf_counter() - started < a.seconds:
        ver += 1
        ups, dels = {}, set()
        for _ in range(a.changes):
            r = rng.randrange(100)
            if r < 20:
                ups[next_key] = f"i{ver}"
                live_list.append(next_key)
                next_key += 1
            else:
                k = live_list[rng.randrange(len(live_list))]
                if k in ups or k in dels or k not in live:
                    continue
                if r < 32:
                    dels.add(k)
                else:
                    ups[k] = f"u{ver}"
        batch = pa.table(
            {
                "id": pa.array(list(ups), pa.int64()),
                "v": pa.array(list(ups.values())),
                "ver": pa.array([ver] * len(ups), pa.int64()),
            },
            schema=schema,
        )
        s = time.perf_counter()
        t.upsert(batch, join_cols=["id"])
        if dels:
            t.delete(In("id", list(dels)))
        lat.append(time.perf_counter() - s)
        live.update(ups)
        live.difference_update(dels)
        log(f"commit {len(lat)}: {lat[-1] * 1e3:.0f} ms")
    scan_last = scan_s()
    q = max(1, len(lat) // 4)

    def p50(v):
        v = sorted(v)
        return v[len(v) // 2] * 1e3 if v else None

    print(
        json.dumps(
            {
                "commits": len(lat),
                "p50_first_ms": p50(lat[:q]),
                "p50_last_ms": p50(lat[-q:]),
                "scan_first_s": scan_first,
                "scan_last_s": scan_last,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
