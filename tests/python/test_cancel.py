"""Ctrl-C: a SIGINT during a long append cancels it (KeyboardInterrupt, promptly) and
nothing is committed; the GIL is released meanwhile (another Python thread runs)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pyarrow as pa
import pytest

import floe

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
