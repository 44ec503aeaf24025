"""Ctrl-C: a SIGINT during a long append cancels it (KeyboardInterrupt, promptly) and
nothing is committed; during a long scan (``to_arrow`` or a batch reader's iteration) it
stops the scan promptly, its readers stop working and hold no file open, and the process
scans again after; the GIL is released meanwhile (another Python thread runs)."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import floe
from conftest import pyiceberg_catalog

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def slow_reader(batches: int, delay: float) -> pa.RecordBatchReader:
    def gen():
        for i in range(batches):
            time.sleep(delay)
            yield pa.record_batch([pa.array(range(i * 1000, i * 1000 + 1000), pa.int64())],
                                  schema=SCHEMA)

    return pa.RecordBatchReader.from_batches(SCHEMA, gen())


def test_sigint_cancels_an_append_and_commits_nothing(catalog):
    t = catalog.create_table("db.t", schema=SCHEMA)
    t.append(pa.table({"id": [1, 2, 3]}, schema=SCHEMA))
    before = t.current_snapshot_id
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        t.append(slow_reader(400, 0.05))  # 20 s if not cancelled
    assert time.monotonic() - started < 5
    assert t.refresh().current_snapshot_id == before
    assert t.scan().count() == 3
    assert len(t.snapshots()) == 1


def test_the_gil_is_released_during_work(catalog):
    t = catalog.create_table("db.t", schema=SCHEMA)
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    th = threading.Thread(target=tick)
    th.start()
    # the reader sleeps in Python (holding nothing); the writer waits for it without the GIL
    t.append(slow_reader(40, 0.02))
    stop.set()
    th.join()
    assert len(ticks) > 20
    assert t.scan().count() == 40_000


# The long scan: 100 data files of 4,000,000 rows (400M rows; ~9 s for a filtered scan on
# a 2-core machine, far longer than the test waits), made cheaply: one Parquet file written
# once and hard-linked 100 times, the links registered by pyiceberg's add_files. The
# filter matches no row and prunes no file or row group (metrics cannot bound `id % 1000`),
# so the scan reads everything and a batch reader yields nothing until the end: the wait for
# a batch itself must be interruptible.
BIG_FILES = 100
ROWS_PER_FILE = 4_000_000
NOTHING = "id % 1000 = 1001"


@pytest.fixture(scope="module")
def big_table(tmp_path_factory):
    wh = str(tmp_path_factory.mktemp("big") / "warehouse")
    t = floe.load_catalog("default", warehouse=wh, create=True).create_table(
        "db.big", schema=pa.schema([("id", pa.int64()), ("v", pa.string())]))
    ids = pa.array(np.arange(ROWS_PER_FILE, dtype=np.int64))
    src = os.path.join(wh, "src")
    os.makedirs(src)
    pq.write_table(pa.table({"id": ids, "v": pc.cast(ids, pa.string())}),
                   os.path.join(src, "f0.parquet"), row_group_size=100_000)
    paths = [os.path.join(src, f"f{i}.parquet") for i in range(BIG_FILES)]
    for p in paths[1:]:
        os.link(paths[0], p)
    pyiceberg_catalog(wh).load_table("db.big").add_files(paths)
    t.refresh()
    assert t.scan().count() == BIG_FILES * ROWS_PER_FILE
    return t


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("how", ["to_arrow", "to_arrow_batch_reader"])
def test_sigint_stops_a_long_scan(big_table, how):
    t = big_table
    gc.collect()
    fds = open_fds()

    def scan():
        s = t.scan(row_filter=NOTHING)
        if how == "to_arrow":
            return s.to_arrow().num_rows
        reader = s.to_arrow_batch_reader()
        return sum(b.num_rows for b in reader)

    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as interrupted:
            scan()
        stopped = time.monotonic() - started
    finally:
        timer.cancel()
    assert stopped < 3, stopped  # promptly: the whole scan takes many seconds
    # The reader is gone with the traceback that holds it: its scan's readers stop (no
    # CPU spent after a moment) and no file stays open.
    del interrupted
    gc.collect()
    time.sleep(0.3)
    cpu = time.process_time()
    time.sleep(1.5)
    assert time.process_time() - cpu < 0.5  # a scan left running would use ~1.5-3 s
    assert open_fds() <= fds
    # The process is usable: the runtime scans again, in both forms.
    got = t.scan(row_filter="id < 2", selected_fields=["id"]).to_arrow()
    assert sorted(got.column("id").to_pylist()) == [0] * BIG_FILES + [1] * BIG_FILES
    reader = t.scan(row_filter="id < 2", selected_fields=["id"]).to_arrow_batch_reader()
    assert reader.read_all().num_rows == 2 * BIG_FILES
