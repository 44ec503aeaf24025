#!/usr/bin/env python3
"""Full-snapshot ingestion data set for floe's dedup scenario (deterministic, pyarrow only).

    python tools/bench/gen_snapshots.py OUT_DIR [--days 13] [--rows-per-day 1000000]
        [--snapshots 4] [--change-rate 0.001] [--seed 7] [--files-per-day 1]
        [--start-date 2026-01-01] [--edge-cases]

    # tiny data set for tests:
    python tools/bench/gen_snapshots.py OUT_DIR --days 3 --rows-per-day 200 --change-rate 0.1 --edge-cases

A customer sends full snapshots of the table

    date DATE, product_id BIGINT, store_id BIGINT, attribute_id BIGINT,
    attr_value STRING, update_id BIGINT

key (date, product_id, store_id, attribute_id), partitioned by day(date). After
ingesting snapshots 0..k, per key only the row with the highest update_id must
remain (ties: the later arrival wins); keys missing from a later snapshot are KEPT.

Writes OUT_DIR/snap-<k>/part-<YYYY-MM-DD>-<jjj>.parquet (k = 0..snapshots-1, one
directory per snapshot, files_per_day files per day, Parquet zstd level 1) and
OUT_DIR/manifest.json, and prints one JSON summary line on stdout (progress on stderr).

* Snapshot 0 is the initial full load: exactly rows-per-day rows per day, update_id 1.
* Snapshot k >= 1 is a full snapshot; rows changed or added in it get update_id k+1,
  unchanged rows keep theirs. Of the previous snapshot's rows, ~change_rate/2 get a
  new attr_value, ~change_rate/4 vanish (absent from this and all later snapshots),
  and round(rows_per_day * change_rate / 4) new keys per day appear.
* The same key set (slot -> key mapping) is used on every day; keys are unique per
  day. product_id < 100,000, store_id < 1,000, attribute_id < 20, all int64.
  attr_value is 'v' + a number. Within each file rows are sorted by
  (product_id, store_id, attribute_id); a day's rows are split over its files in
  contiguous key ranges (so the day is sorted across its files too).
* Every value is a pure function of (seed, day, slot, snapshot): splitmix64 hashes
  computed with pyarrow.compute's wrapping uint64 arithmetic (no numpy).

--edge-cases (needs --snapshots >= 3; L = last snapshot) injects, all on the day
days // 2, on keys excluded from the random changes:
  flip_back       key changes at L-1 and flips back at L to its value of L-2 (update_id L+1)
  duplicate       in snapshot L one file holds the key twice, adjacent, with the SAME
                  update_id L+1 and different attr_values: the LATER row (file order) wins
  late_replay     in snapshot L the key's row is its stale version from L-2 (lower
                  update_id than the one stored at L-1, different value): must be ignored
  vanish_return   key present in snapshot 0, absent from 1, back in 2 with a new value
                  (update_id 3), unchanged afterwards
The manifest lists each as {"case", "date", "product_id", "store_id", "attribute_id",
"history": [{"snapshot", "attr_value", "update_id"}, ...] (rows as sent, in arrival
order), "expected": {"attr_value", "update_id"} (the row the table must hold after the
last snapshot), "note"}; duplicate also has "file" (relative path), "rows" (0-based row
numbers of the two rows in that file) and "winner_row"; late_replay has "file" and "row".

manifest.json: {"format": "floe-gen-snapshots/1", "params": {...}, "schema", "key",
"version", "partition", "edge_day", "snapshots": [{"index", "dir", "update_id",
"rows", "bytes", "changed", "vanished", "added", "returned", "duplicate_rows",
"replayed_rows", "expected": {"rows", "update_id_counts"}, "files": [{"path"
(relative to OUT_DIR), "date", "rows", "bytes"}], "days": [{"date", "rows",
"changed", "vanished", "added", "returned"}]}], "edge_cases": [...],
"expected_final": {"rows", "update_id_counts"}}. "expected" after snapshot k is the
deduplicated table after ingesting snapshots 0..k (row count = distinct keys seen).
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

N_PRODUCTS = 100_000
N_STORES = 1_000
N_ATTRS = 20
KEYSPACE = N_PRODUCTS * N_STORES * N_ATTRS  # 2e9 composite key codes per day

SCHEMA = pa.schema(
    [
        pa.field("date", pa.date32()),
        pa.field("product_id", pa.int64()),
        pa.field("store_id", pa.int64()),
        pa.field("attribute_id", pa.int64()),
        pa.field("attr_value", pa.string()),
        pa.field("update_id", pa.int64()),
    ]
)
KEY = ["date", "product_id", "store_id", "attribute_id"]

# hash stream purposes
P_CODE, P_RESERVED, P_INIT_VAL, P_CHANGE, P_NEW_VAL, P_BORN_VAL = range(1, 7)


def splitmix64_int(x: int) -> int:
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _u64(v: int) -> pa.Scalar:
    return pa.scalar(v & MASK64, pa.uint64())


def stream_key(seed: int, purpose: int, day: int = 0, snap: int = 0) -> int:
    return splitmix64_int(splitmix64_int(seed & MASK64) ^ ((purpose << 48) | (day << 24) | snap))


def hash_slots(slots_u64: pa.Array, key: int) -> pa.Array:
    """splitmix64(slot * GOLDEN + key) over a uint64 array (wrapping arithmetic)."""
    z = pc.add(pc.multiply(slots_u64, _u64(GOLDEN)), _u64(key))
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _u64(30))), _u64(0xBF58476D1CE4E5B9))
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _u64(27))), _u64(0x94D049BB133111EB))
    return pc.bit_wise_xor(z, pc.shift_right(z, _u64(31)))


def uniform_below(h: pa.Array, n: int) -> pa.Array:
    """uint64 hash -> int64 in [0, n) (multiply-high on the top 32 bits; n < 2**32)."""
    assert 0 < n < (1 << 32)
    hi = pc.shift_right(h, _u64(32))
    return pc.cast(pc.shift_right(pc.multiply(hi, _u64(n)), _u64(32)), pa.int64())


def i64(v: int) -> pa.Scalar:
    return pa.scalar(v, pa.int64())


class Layout:
    """Slots 0..U-1 map to strictly increasing key codes (same on every day).

    N slots are in the initial load; R = (S-1)*A reserved slots, spread evenly over
    the slot range, are born in snapshots 1..S-1 (A per snapshot)."""

    def __init__(self, n: int, snapshots: int, change_rate: float, seed: int):
        self.n = n
        self.adds_per_snap = int(round(n * change_rate / 4)) if snapshots > 1 else 0
        r = self.adds_per_snap * (snapshots - 1)
        u = n + r
        if u > KEYSPACE:
            raise SystemExit(f"too many rows per day ({u} slots > {KEYSPACE} keys)")
        self.u = u
        slots = pa.array(range(u), pa.int64())
        self.slot_i64 = slots
        self.slot_u64 = pc.cast(slots, pa.uint64())
        gap = KEYSPACE // u
        code = pc.add(pc.multiply(slots, i64(gap)), uniform_below(hash_slots(self.slot_u64, stream_key(seed, P_CODE)), gap))
        sa = N_STORES * N_ATTRS
        prod = pc.divide(code, i64(sa))
        rest = pc.subtract(code, pc.multiply(prod, i64(sa)))
        store = pc.divide(rest, i64(N_ATTRS))
        attr = pc.subtract(rest, pc.multiply(store, i64(N_ATTRS)))
        self.product, self.store, self.attr = prod, store, attr
        # reserved slots: one per stride of U/R, jittered inside the stride
        birth = [0] * u
        if r:
            stride = u // r
            rk = stream_key(seed, P_RESERVED)
            for j in range(r):
                pos = (j * u) // r + (splitmix64_int(rk ^ j) % stride)
                birth[pos] = 1 + (j % (snapshots - 1))
        self.birth_list = birth
        self.birth = pa.array(birth, pa.int64())
        assert sum(1 for b in birth if b == 0) == n

    def key_of(self, slot: int) -> dict:
        return {
            "product_id": self.product[slot].as_py(),
            "store_id": self.store[slot].as_py(),
            "attribute_id": self.attr[slot].as_py(),
        }


def count(mask: pa.Array) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def set_at(arr: pa.Array, slot_idx: pa.Array, slot: int, value) -> pa.Array:
    return pc.if_else(pc.equal(slot_idx, i64(slot)), pa.scalar(value, arr.type), arr)


def split_bounds(nrows: int, parts: int, keep_together: int | None) -> list[int]:
    """Contiguous split points [0, b1, ..., nrows]; never between rows keep_together-1 and keep_together."""
    b = [(i * nrows) // parts for i in range(parts + 1)]
    if keep_together is not None:
        b = [x + 1 if x == keep_together and 0 < x < nrows else x for x in b]
    return b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--days", type=int, default=13)
    ap.add_argument("--rows-per-day", type=int, default=1_000_000)
    ap.add_argument("--snapshots", type=int, default=4)
    ap.add_argument("--change-rate", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--files-per-day", type=int, default=1)
    ap.add_argument("--start-date", default="2026-01-01")
    ap.add_argument("--edge-cases", action="store_true")
    args = ap.parse_args(argv)
    if args.days < 1 or args.rows_per_day < 1 or args.snapshots < 1 or args.files_per_day < 1:
        ap.error("days, rows-per-day, snapshots and files-per-day must be >= 1")
    if not 0.0 <= args.change_rate <= 1.0:
        ap.error("change-rate must be in [0, 1]")
    if args.edge_cases and (args.snapshots < 3 or args.rows_per_day < 8):
        ap.error("--edge-cases needs --snapshots >= 3 and --rows-per-day >= 8")

    t0 = time.perf_counter()
    out_dir = os.path.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    S, L = args.snapshots, args.snapshots - 1
    start = dt.date.fromisoformat(args.start_date)
    lay = Layout(args.rows_per_day, S, args.change_rate, args.seed)
    slot_idx, slot_u64 = lay.slot_i64, lay.slot_u64

    # thresholds on a uint64 hash: [0, t_chg) -> change, [t_chg, t_van) -> vanish
    t_chg = min(int(args.change_rate / 2 * 2**64), MASK64)
    t_van = min(int(args.change_rate * 3 / 4 * 2**64), MASK64)

    # snapshot directories: drop our own stale part files
    snap_dirs = []
    for k in range(S):
        d = os.path.join(out_dir, f"snap-{k}")
        os.makedirs(d, exist_ok=True)
        for p in glob.glob(os.path.join(d, "part-*.parquet")):
            os.remove(p)
        snap_dirs.append(d)
    for d in glob.glob(os.path.join(out_dir, "snap-*")):
        tail = os.path.basename(d)[5:]
        if tail.isdigit() and int(tail) >= S:
            for p in glob.glob(os.path.join(d, "part-*.parquet")):
                os.remove(p)

    # edge-case slots: initial-load slots near 1/5 .. 4/5 of the slot range
    edge_day = args.days // 2
    edge = {}
    if args.edge_cases:
        used = set()
        for name, frac in (("flip_back", 0.2), ("duplicate", 0.4), ("late_replay", 0.6), ("vanish_return", 0.8)):
            s = int(lay.u * frac)
            while lay.birth_list[s] != 0 or s in used:
                s = (s + 1) % lay.u
            used.add(s)
            edge[name] = s
    edge_mask = pc.is_in(slot_idx, value_set=pa.array(sorted(edge.values()), pa.int64())) if edge else None

    snaps = [
        {"index": k, "dir": f"snap-{k}", "update_id": k + 1, "rows": 0, "bytes": 0, "changed": 0, "vanished": 0,
         "added": 0, "returned": 0, "duplicate_rows": 0, "replayed_rows": 0,
         "expected": {"rows": 0, "update_id_counts": {}}, "files": [], "days": []}
        for k in range(S)
    ]
    edge_info: dict[str, dict] = {}

    def hist(name, k, val, uid):
        edge_info.setdefault(name, {"history": []})["history"].append(
            {"snapshot": k, "attr_value": f"v{val}", "update_id": uid})

    for day in range(args.days):
        date = start + dt.timedelta(days=day)
        is_edge_day = bool(edge) and day == edge_day
        birth = lay.birth
        present = pc.equal(birth, i64(0))
        dead = pc.not_equal(birth, birth)  # all false
        val = uniform_below(hash_slots(slot_u64, stream_key(args.seed, P_INIT_VAL, day)), 1_000_000)
        uid = pa.repeat(i64(1), lay.u)
        init_val = {n: val[s].as_py() for n, s in edge.items()} if is_edge_day else {}
        prev_present, prev_uid = present, uid
        for k in range(S):
            if k > 0:
                h = hash_slots(slot_u64, stream_key(args.seed, P_CHANGE, day, k))
                sel = prev_present if edge_mask is None else pc.and_(prev_present, pc.invert(edge_mask))
                chg = pc.and_(sel, pc.less(h, _u64(t_chg)))
                van = pc.and_(sel, pc.and_(pc.greater_equal(h, _u64(t_chg)), pc.less(h, _u64(t_van))))
                born = pc.equal(birth, i64(k))
                dead = pc.or_(dead, van)
                newv = pc.add(val, pc.add(i64(1), uniform_below(hash_slots(slot_u64, stream_key(args.seed, P_NEW_VAL, day, k)), 1000)))
                val = pc.if_else(chg, newv, val)
                bornv = uniform_below(hash_slots(slot_u64, stream_key(args.seed, P_BORN_VAL, day, k)), 1_000_000)
                val = pc.if_else(born, bornv, val)
                uid = pc.if_else(pc.or_(chg, born), i64(k + 1), uid)
            out_override = None  # (slot, value, uid) written instead of the state row
            dup_row = None  # (slot, value, uid) inserted before the state row
            if is_edge_day:
                x, z, y, w = edge["flip_back"], edge["duplicate"], edge["late_replay"], edge["vanish_return"]
                if k == L - 1:
                    val = set_at(val, slot_idx, x, init_val["flip_back"] + 1 + 17)
                    uid = set_at(uid, slot_idx, x, k + 1)
                    val = set_at(val, slot_idx, y, init_val["late_replay"] + 5)
                    uid = set_at(uid, slot_idx, y, k + 1)
                if k == L:
                    val = set_at(val, slot_idx, x, init_val["flip_back"])
                    uid = set_at(uid, slot_idx, x, k + 1)
                    val = set_at(val, slot_idx, z, init_val["duplicate"] + 9)
                    uid = set_at(uid, slot_idx, z, k + 1)
                    dup_row = (z, init_val["duplicate"] + 3, k + 1)
                    # the stale L-2 version of y (never changed before L-1 -> initial row)
                    out_override = (y, init_val["late_replay"], 1)
                if k == 1:
                    dead = set_at(dead, slot_idx, w, True)
                if k == 2:
                    dead = set_at(dead, slot_idx, w, False)
                    val = set_at(val, slot_idx, w, init_val["vanish_return"] + 11)
                    uid = set_at(uid, slot_idx, w, k + 1)
            if k > 0:
                present = pc.and_(pc.less_equal(birth, i64(k)), pc.invert(dead))

            # statistics from the state transition
            sd = {"date": date.isoformat(), "rows": 0, "changed": 0, "vanished": 0, "added": 0, "returned": 0}
            if k > 0:
                both = pc.and_(prev_present, present)
                sd["changed"] = count(pc.and_(both, pc.not_equal(uid, prev_uid)))
                sd["vanished"] = count(pc.and_(prev_present, pc.invert(present)))
                appeared = pc.and_(pc.invert(prev_present), present)
                sd["added"] = count(pc.and_(appeared, pc.equal(birth, i64(k))))
                sd["returned"] = count(pc.and_(appeared, pc.less(birth, i64(k))))
            seen = pc.less_equal(birth, i64(k))
            exp = snaps[k]["expected"]
            exp["rows"] += count(seen)
            for item in pc.value_counts(uid.filter(seen)).to_pylist():
                key = str(item["values"])
                exp["update_id_counts"][key] = exp["update_id_counts"].get(key, 0) + item["counts"]

            # rows of this snapshot/day, in slot (= key) order
            ps = slot_idx.filter(present)
            pv = val.filter(present)
            pu = uid.filter(present)
            pos_dup = pos_rep = None
            if out_override is not None:
                s, v, u = out_override
                pos_rep = pc.index(ps, i64(s)).as_py()
                m = pc.equal(ps, i64(s))
                pv = pc.if_else(m, i64(v), pv)
                pu = pc.if_else(m, i64(u), pu)
            if dup_row is not None:
                s, v, u = dup_row
                p = pc.index(ps, i64(s)).as_py()
                ps = pa.concat_arrays([ps[:p], pa.array([s], pa.int64()), ps[p:]])
                pv = pa.concat_arrays([pv[:p], pa.array([v], pa.int64()), pv[p:]])
                pu = pa.concat_arrays([pu[:p], pa.array([u], pa.int64()), pu[p:]])
                pos_dup = p  # rows p (loser) and p+1 (winner)
                if pos_rep is not None and pos_rep >= p:
                    pos_rep += 1
            n = len(ps)
            tbl = pa.Table.from_arrays(
                [
                    pa.repeat(pa.scalar(date, pa.date32()), n),
                    lay.product.take(ps),
                    lay.store.take(ps),
                    lay.attr.take(ps),
                    pc.binary_join_element_wise(pa.scalar("v"), pc.cast(pv, pa.string()), ""),
                    pu,
                ],
                schema=SCHEMA,
            )
            bounds = split_bounds(n, args.files_per_day, None if pos_dup is None else pos_dup + 1)
            for j in range(args.files_per_day):
                lo, hi = bounds[j], bounds[j + 1]
                rel = os.path.join(f"snap-{k}", f"part-{date.isoformat()}-{j:03d}.parquet")
                path = os.path.join(out_dir, rel)
                pq.write_table(tbl.slice(lo, hi - lo), path, compression="zstd", compression_level=1)
                size = os.path.getsize(path)
                snaps[k]["files"].append({"path": rel, "date": date.isoformat(), "rows": hi - lo, "bytes": size})
                snaps[k]["bytes"] += size
                for name, pos in (("duplicate", pos_dup), ("late_replay", pos_rep)):
                    if pos is not None and lo <= pos < hi:
                        edge_info.setdefault(name, {})["file"] = rel
                        if name == "duplicate":  # loser at pos, winner right after it
                            edge_info[name]["rows"] = [pos - lo, pos - lo + 1]
                            edge_info[name]["winner_row"] = pos - lo + 1
                        else:
                            edge_info[name]["row"] = pos - lo
            sd["rows"] = n
            snaps[k]["days"].append(sd)
            snaps[k]["rows"] += n
            for f in ("changed", "vanished", "added", "returned"):
                snaps[k][f] += sd[f]
            if pos_dup is not None:
                snaps[k]["duplicate_rows"] += 1
            if pos_rep is not None:
                snaps[k]["replayed_rows"] += 1
            if is_edge_day:
                for name, s in edge.items():
                    if name == "late_replay" and out_override is not None:
                        hist(name, k, out_override[1], out_override[2])
                    elif name == "duplicate" and dup_row is not None:
                        hist(name, k, dup_row[1], dup_row[2])
                        hist(name, k, val[s].as_py(), uid[s].as_py())
                    elif present[s].as_py():
                        hist(name, k, val[s].as_py(), uid[s].as_py())
                    if k == L:
                        edge_info[name]["expected"] = {"attr_value": f"v{val[s].as_py()}", "update_id": uid[s].as_py()}
            prev_present, prev_uid = present, uid
        print(f"[gen_snapshots] day {date} done ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)

    notes = {
        "flip_back": f"attr_value changes in snapshot {L - 1} and flips back in snapshot {L} to its value of "
                     f"snapshot {L - 2}, with a higher update_id; the flipped-back row must win",
        "duplicate": f"snapshot {L}: the key appears twice, adjacent, in one file with the SAME update_id and "
                     "different attr_values; the LATER row in file order must win",
        "late_replay": f"snapshot {L}: the key's row is a stale replay (its snapshot-{L - 2} version: lower update_id "
                       f"than the row stored from snapshot {L - 1}, different attr_value); it must be ignored",
        "vanish_return": "present in snapshot 0, absent from snapshot 1 (the old row stays in the table), back in "
                         "snapshot 2 with a new attr_value and update_id 3",
    }
    edge_cases = []
    for name, s in edge.items():
        e = {"case": name, "date": (start + dt.timedelta(days=edge_day)).isoformat(), **lay.key_of(s)}
        e.update(edge_info.get(name, {}))
        e["note"] = notes[name]
        edge_cases.append(e)

    manifest = {
        "format": "floe-gen-snapshots/1",
        "params": {"days": args.days, "rows_per_day": args.rows_per_day, "snapshots": S,
                   "change_rate": args.change_rate, "seed": args.seed, "files_per_day": args.files_per_day,
                   "start_date": start.isoformat(), "edge_cases": args.edge_cases},
        "schema": [f"{f.name}:{f.type}" for f in SCHEMA],
        "key": KEY,
        "version": "update_id",
        "partition": "day(date)",
        "edge_day": (start + dt.timedelta(days=edge_day)).isoformat() if edge else None,
        "snapshots": snaps,
        "edge_cases": edge_cases,
        "expected_final": snaps[-1]["expected"],
    }
    mpath = os.path.join(out_dir, "manifest.json")
    with open(mpath + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(mpath + ".tmp", mpath)

    summary = {
        "out_dir": out_dir,
        "manifest": mpath,
        "snapshots": S,
        "files": sum(len(s["files"]) for s in snaps),
        "rows": sum(s["rows"] for s in snaps),
        "rows_per_snapshot": [s["rows"] for s in snaps],
        "bytes": sum(s["bytes"] for s in snaps),
        "expected_final_rows": snaps[-1]["expected"]["rows"],
        "edge_cases": [e["case"] for e in edge_cases],
        "seconds": round(time.perf_counter() - t0, 3),
        "seed": args.seed,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
