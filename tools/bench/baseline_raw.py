#!/usr/bin/env python3
"""Raw pyarrow reference figures (no Iceberg), for orientation only.

    <peers-venv>/bin/python tools/bench/baseline_raw.py --data DIR [--work DIR] [--repeat 3] [--threads 2]

Reads the gen_data.py Parquet files (all *.parquet in --data) into one in-memory
Arrow table (untimed, reported as load_s), then per repeat:

  write_s  write that table as --threads Parquet files of equal rows (zstd level 1,
           pyarrow default 1 Mi-row row groups), one file per thread, written
           concurrently (pyarrow releases the GIL); no fsync
  read_s   pq.read_table() of the files just written, all columns, with the
           Arrow CPU pool set to --threads threads

Best (minimum) of --repeat is reported. The files go to --work (default: a fresh
temporary directory, removed at the end).

Prints one JSON object on stdout:
  {"write_s", "read_s", "rows", "bytes_written", "files_written", "threads",
   "runs": {"write_s": [...], "read_s": [...]} (wall), "cpu_runs": {same, process
   CPU seconds user+sys}, "load_s", "in_memory_bytes", "versions"}
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", help="directory for the written files (default: a temp dir, removed afterwards)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="files written concurrently, and Arrow CPU threads for the read")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        ap.error("--repeat and --threads must be >= 1")

    pa.set_cpu_count(args.threads)
    files = sorted(glob.glob(os.path.join(args.data, "*.parquet")))
    if not files:
        ap.error(f"no *.parquet in {args.data}")
    t0 = time.perf_counter()
    table = pq.read_table(files)
    load_s = time.perf_counter() - t0
    rows = table.num_rows

    own_tmp = args.work is None
    work = tempfile.mkdtemp(prefix="floe-bench-raw-") if own_tmp else os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    outs = [os.path.join(work, f"raw-{i:05d}.parquet") for i in range(args.threads)]
    base, extra = divmod(rows, args.threads)
    slices, start = [], 0
    for i in range(args.threads):
        n = base + (1 if i < extra else 0)
        slices.append(table.slice(start, n))
        start += n

    def write_one(i: int) -> None:
        pq.write_table(slices[i], outs[i], compression="zstd", compression_level=1)

    runs: dict[str, list[float]] = {"write_s": [], "read_s": []}
    cpu_runs: dict[str, list[float]] = {"write_s": [], "read_s": []}
    bytes_written = 0
    try:
        with ThreadPoolExecutor(max_workers=args.threads) as pool:
            for _ in range(args.repeat):
                for p in outs:
                    if os.path.exists(p):
                        os.remove(p)
                gc.collect()
                c0, t0 = time.process_time(), time.perf_counter()
                list(pool.map(write_one, range(args.threads)))
                runs["write_s"].append(time.perf_counter() - t0)
                cpu_runs["write_s"].append(time.process_time() - c0)
                bytes_written = sum(os.path.getsize(p) for p in outs)

                gc.collect()
                c0, t0 = time.process_time(), time.perf_counter()
                back = pq.read_table(outs, use_threads=True)
                runs["read_s"].append(time.perf_counter() - t0)
                cpu_runs["read_s"].append(time.process_time() - c0)
                if back.num_rows != rows:
                    raise SystemExit(f"read {back.num_rows} rows, expected {rows}")
                del back
                print(
                    f"[baseline_raw] write {runs['write_s'][-1]:.3f}s read {runs['read_s'][-1]:.3f}s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)

    out = {k: round(min(v), 4) for k, v in runs.items()}
    out.update(
        {
            "rows": rows,
            "bytes_written": bytes_written,
            "files_written": args.threads,
            "threads": args.threads,
            "runs": {k: [round(x, 4) for x in v] for k, v in runs.items()},
            "cpu_runs": {k: [round(x, 4) for x in v] for k, v in cpu_runs.items()},
            "repeat": args.repeat,
            "load_s": round(load_s, 4),
            "in_memory_bytes": table.nbytes,
            "versions": {"pyarrow": pa.__version__, "python": sys.version.split()[0]},
        }
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
