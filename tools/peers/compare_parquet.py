#!/usr/bin/env python3
"""Compare floe's own scan (a Parquet file) with expected rows (a Parquet file), using the
same canonicalization as peer_check.py.

    python compare_parquet.py EXPECTED.parquet ACTUAL.parquet

Prints one JSON line {"rows", "expected_rows", "checksum", "expected_checksum", "ok"} (plus
"missing"/"unexpected" samples when they differ); exit code 0 only when the rows match.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow.parquet as pq  # noqa: E402

import peer_check  # noqa: E402


def main(argv):
    expected_path, actual_path = argv[1], argv[2]
    exp = pq.read_table(expected_path)
    act = pq.read_table(actual_path)
    columns = exp.column_names
    types = [exp.schema.field(c).type for c in columns]
    want = peer_check.canon_rows(columns, types, peer_check.arrow_rows(exp, columns))
    got = peer_check.canon_rows(columns, types, peer_check.arrow_rows(act, columns))
    rec = {
        "rows": len(got),
        "expected_rows": len(want),
        "checksum": peer_check.checksum(got),
        "expected_checksum": peer_check.checksum(want),
    }
    rec["ok"] = rec["checksum"] == rec["expected_checksum"]
    if not rec["ok"]:
        rec["missing"], rec["unexpected"] = peer_check.diff(want, got, 5)
    print(json.dumps(rec, default=str))
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
