#!/usr/bin/env python3
"""The peers' side of floe's planning benchmark (benches/planning.rs, issue 45).

    <peers-venv>/bin/python tools/bench/planning_peers.py --metadata PATH --id ID [--p 5]
        [--engines duckdb,pyiceberg[,spark]] [--threads 2] [--repeat 3] [--pyiceberg-repeat 1]
        [--spark-repeat 1] [--spark-driver-memory 4g] [--queries count,part,id,limit]

PATH is a table's *.metadata.json (plain path or file:// URI). The table has columns
`id long, p int, v string` and is identity-partitioned by `p`. Four queries, each run
--repeat times (the median is reported, and every run):

  count  the table's row count
  part   the row count WHERE p = <--p>        (a partition point lookup)
  id     the row count WHERE id = <--id>      (a column-metrics point lookup)
  limit  any 10 rows (all columns)

DuckDB 1.5.5 (+ iceberg/avro extensions 1.5.5 loaded by path from their wheels, avro first,
with autoinstall/autoload off: nothing is downloaded): every timed run opens a fresh
in-memory connection and loads the extensions untimed, then times execute + fetchall of
`SELECT count(*) FROM iceberg_scan(PATH) [WHERE ...]` or `SELECT * FROM iceberg_scan(PATH)
LIMIT 10`.

pyiceberg 0.12: every timed run starts from nothing: `StaticTable.from_metadata(PATH)`, the
scan, `list(scan.plan_files())` (→ `plan_s`, and `files`: the tasks planned), then the
answer from those tasks (→ `s`): for the counts, what `DataScan.count()` does (record counts
from metadata where a task's residual is true and it has no deletes, else the task read with
pyarrow); for `limit`, the tasks read with the scan's limit of 10
(`_to_arrow_via_file_scan_tasks`, what `to_arrow()` does after planning).

Spark 3.5.8 + Iceberg 1.10.2 (`spark`, not in the default --engines): Iceberg Java's planner.
One local[2] session of tools/peers/floe_peers.py (`spark_session()`, the Iceberg runtime jar
from its wheel: nothing is downloaded), driver memory --spark-driver-memory. JVM start-up and
one warm-up (planning the whole table's scan, then `limit(10).collect()`) are untimed
(`spark_setup`). Every timed run then loads the table afresh from PATH
(`spark.read.format("iceberg").load(PATH)`, Iceberg's `HadoopTables` reading the
metadata.json: no catalog, no table cache) and applies the same filter as DuckDB's. Two
timings per run, each from a fresh DataFrame:
  plan_s  `df.where(...)` (or `df.limit(10)`) → `queryExecution().executedPlan()` → its
          BatchScanExec's `inputPartitions()`: Spark's analysis and optimisation and Iceberg's
          planning (`planFiles` + `planTasks`, Iceberg's default planning mode) on the driver.
          (`df.inputFiles()` does not work here: it lists only Spark's own file sources and
          returns [] for an Iceberg table.) `files` / `delete_files`: the data / delete files
          planned, from the scan's driver metrics (`resultDataFiles` / `resultDeleteFiles`);
          `iceberg_plan_s`: Iceberg's own `totalPlanningDuration` of that scan.
  s       the whole answer: `df.where(...).count()`, or `df.limit(10).collect()`. Spark plans
          again for it; an unfiltered count(*) is pushed down to Iceberg, answered from the
          manifests' record counts where there are no delete files. Iceberg 1.10.2 does not
          push a limit into planning: `limit` plans every file.
Medians over --spark-repeat runs, and every run.

Progress goes to stderr (so does anything the JVM prints: the JSON is written to the original
stdout); stdout gets one JSON object:
  {"duckdb": {query: {"s", "runs", "rows"}} | {"error"},
   "pyiceberg": {query: {"s", "plan_s", "runs", "plan_runs", "files", "rows"}} | {"error"},
   "spark": {query: {"s", "plan_s", "runs", "plan_runs", "files", "rows",
                     "delete_files", "iceberg_plan_s"}} | {"error"},
   "spark_setup": {"session_s", "warmup_s", "driver_memory"} (with spark),
   "metadata", "threads", "versions"}
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

PEERS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers")


def log(msg: str) -> None:
    print(f"[planning_peers] {msg}", file=sys.stderr, flush=True)


def extension_path(name: str) -> str:
    import duckdb

    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"python package duckdb-extension-{name} is not installed in {sys.prefix}")
    pkg = list(spec.submodule_search_locations)[0]
    path = os.path.join(pkg, "extensions", f"v{duckdb.__version__}", f"{name}.duckdb_extension")
    if not os.path.exists(path):
        raise SystemExit(f"{path} missing: the {name} extension wheel must match duckdb {duckdb.__version__}")
    return path


def duck_connect(threads: int):
    import duckdb

    con = duckdb.connect(
        database=":memory:",
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"},
    )
    for name in ("avro", "iceberg"):  # avro first: iceberg's init would otherwise try to install it
        con.execute(f"LOAD '{extension_path(name)}'")
    con.execute(f"SET threads={int(threads)}")
    return con


def sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def filters(args) -> dict[str, str | None]:
    return {"count": None, "part": f"p = {args.p}", "id": f"id = {args.id}", "limit": None}


def run_duckdb(args, path: str, queries: list[str]) -> dict:
    src = f"iceberg_scan({sql_str(path)})"
    out = {}
    for q in queries:
        cond = filters(args)[q]
        if q == "limit":
            sql = f"SELECT * FROM {src} LIMIT 10"
        else:
            sql = f"SELECT count(*) FROM {src}" + (f" WHERE {cond}" if cond else "")
        runs, rows = [], None
        for _ in range(args.repeat):
            con = duck_connect(args.threads)
            t0 = time.perf_counter()
            res = con.execute(sql).fetchall()
            runs.append(time.perf_counter() - t0)
            con.close()
            rows = len(res) if q == "limit" else int(res[0][0])
            log(f"duckdb {q}: {runs[-1]:.3f} s, rows {rows}")
        out[q] = {"s": round(statistics.median(runs), 4), "runs": [round(x, 4) for x in runs], "rows": rows, "sql": sql}
    return out


def run_pyiceberg(args, uri: str, queries: list[str]) -> dict:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import StaticTable, _to_arrow_via_file_scan_tasks

    out = {}
    for q in queries:
        cond = filters(args)[q]
        runs, plan_runs, files, rows = [], [], None, None
        for _ in range(args.pyiceberg_repeat):
            t0 = time.perf_counter()
            tbl = StaticTable.from_metadata(uri)
            kw = {}
            if cond:
                kw["row_filter"] = cond
            if q == "limit":
                kw["limit"] = 10
            scan = tbl.scan(**kw)
            tasks = list(scan.plan_files())
            t_plan = time.perf_counter()
            if q == "limit":
                rows = len(_to_arrow_via_file_scan_tasks(scan, scan.projection(), tasks))
            else:
                # DataScan.count(), on the tasks already planned.
                n = 0
                for task in tasks:
                    if task.residual == AlwaysTrue() and len(task.delete_files) == 0:
                        n += task.file.record_count
                    else:
                        arrow_scan = ArrowScan(
                            table_metadata=scan.table_metadata,
                            io=scan.io,
                            projected_schema=scan.projection(),
                            row_filter=scan.row_filter,
                            case_sensitive=scan.case_sensitive,
                        )
                        n += len(arrow_scan.to_table([task]))
                rows = n
            t1 = time.perf_counter()
            runs.append(t1 - t0)
            plan_runs.append(t_plan - t0)
            files = len(tasks)
            log(f"pyiceberg {q}: plan {plan_runs[-1]:.3f} s, answer {runs[-1]:.3f} s, files {files}, rows {rows}")
        out[q] = {
            "s": round(statistics.median(runs), 4),
            "plan_s": round(statistics.median(plan_runs), 4),
            "runs": [round(x, 4) for x in runs],
            "plan_runs": [round(x, 4) for x in plan_runs],
            "files": files,
            "rows": rows,
        }
    return out


def spark_scan_exec(plan):
    """The BatchScanExec leaf of a physical plan (looking inside adaptive plans)."""
    it = plan.collectLeaves().iterator()
    while it.hasNext():
        leaf = it.next()
        name = leaf.getClass().getSimpleName()
        if name == "BatchScanExec":
            return leaf
        if name == "AdaptiveSparkPlanExec":
            found = spark_scan_exec(leaf.executedPlan())
            if found is not None:
                return found
    return None


def spark_query(spark, path: str, q: str, cond: str | None):
    df = spark.read.format("iceberg").load(path)
    if q == "limit":
        return df.limit(10)
    return df.where(cond) if cond else df


def spark_plan(spark, path: str, q: str, cond: str | None) -> tuple[float, dict]:
    """Time the planning of the query's scan; return it and the scan's driver metrics."""
    t0 = time.perf_counter()
    df = spark_query(spark, path, q, cond)
    scan_exec = spark_scan_exec(df._jdf.queryExecution().executedPlan())
    if scan_exec is None:
        raise RuntimeError(f"no BatchScanExec in the plan of {q}")
    scan_exec.inputPartitions()  # lazy: Iceberg's planFiles + planTasks
    t = time.perf_counter() - t0
    return t, {m.name(): m.value() for m in scan_exec.scan().reportDriverMetrics()}


def spark_answer(spark, path: str, q: str, cond: str | None) -> tuple[float, int]:
    t0 = time.perf_counter()
    df = spark_query(spark, path, q, cond)
    rows = len(df.collect()) if q == "limit" else int(df.count())
    return time.perf_counter() - t0, rows


def spark_open(args, out: dict):
    sys.path.insert(0, os.path.abspath(PEERS_DIR))
    import floe_peers

    t0 = time.perf_counter()
    spark = floe_peers.spark_session(
        app="floe-bench-planning", conf={"spark.driver.memory": args.spark_driver_memory}
    )
    session_s = time.perf_counter() - t0
    jvm = spark._jvm
    out["versions"]["spark"] = spark.version
    out["versions"]["iceberg"] = jvm.org.apache.iceberg.IcebergBuild.version()
    out["versions"]["java"] = jvm.java.lang.System.getProperty("java.version")
    out["spark_setup"] = {
        "session_s": round(session_s, 3),
        "driver_memory": spark.sparkContext.getConf().get("spark.driver.memory"),
    }
    log(f"spark {spark.version} + iceberg {out['versions']['iceberg']}: session in {session_s:.1f} s")
    return spark


def run_spark(args, spark, path: str, queries: list[str], out_setup: dict) -> dict:
    t0 = time.perf_counter()
    spark_plan(spark, path, "count", None)
    spark_answer(spark, path, "limit", None)
    out_setup["warmup_s"] = round(time.perf_counter() - t0, 3)
    log(f"spark warm-up: {out_setup['warmup_s']:.1f} s")
    out = {}
    for q in queries:
        cond = filters(args)[q]
        runs, plan_runs, ice_runs, files, deletes, rows = [], [], [], None, None, None
        for _ in range(args.spark_repeat):
            t_plan, metrics = spark_plan(spark, path, q, cond)
            plan_runs.append(t_plan)
            ice_runs.append(metrics.get("totalPlanningDuration", 0) / 1e3)
            files = metrics.get("resultDataFiles")
            deletes = metrics.get("resultDeleteFiles")
            t, rows = spark_answer(spark, path, q, cond)
            runs.append(t)
            log(
                f"spark {q}: plan {t_plan:.3f} s (iceberg {ice_runs[-1]:.3f} s), answer {t:.3f} s, "
                f"files {files}, delete files {deletes}, rows {rows}"
            )
        out[q] = {
            "s": round(statistics.median(runs), 4),
            "plan_s": round(statistics.median(plan_runs), 4),
            "runs": [round(x, 4) for x in runs],
            "plan_runs": [round(x, 4) for x in plan_runs],
            "files": files,
            "rows": rows,
            "delete_files": deletes,
            "iceberg_plan_s": round(statistics.median(ice_runs), 4),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metadata", required=True, help="path (or file:// URI) of the table's *.metadata.json")
    ap.add_argument("--id", type=int, required=True, help="the id of the metrics point lookup")
    ap.add_argument("--p", type=int, default=5, help="the partition of the partition point lookup")
    ap.add_argument("--engines", default="duckdb,pyiceberg", help="of duckdb,pyiceberg,spark (default duckdb,pyiceberg)")
    ap.add_argument("--queries", default="count,part,id,limit")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB threads")
    ap.add_argument("--repeat", type=int, default=3, help="DuckDB runs per query (median reported)")
    ap.add_argument("--pyiceberg-repeat", type=int, default=1, help="pyiceberg runs per query (median reported)")
    ap.add_argument("--spark-repeat", type=int, default=1, help="Spark runs per query (median reported)")
    ap.add_argument("--spark-driver-memory", default="4g", help="Spark driver memory (local[2]: the whole JVM)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.pyiceberg_repeat < 1 or args.spark_repeat < 1 or args.threads < 1:
        ap.error("--repeat, --pyiceberg-repeat, --spark-repeat and --threads must be >= 1")

    path = args.metadata[len("file://"):] if args.metadata.startswith("file://") else args.metadata
    path = os.path.abspath(path)
    if not os.path.exists(path):
        ap.error(f"{path} does not exist")
    uri = "file://" + path
    queries = [q for q in args.queries.split(",") if q]
    bad = [q for q in queries if q not in filters(args)]
    if bad:
        ap.error(f"unknown queries {bad}; known: count,part,id,limit")
    engines = [e for e in args.engines.split(",") if e]
    bad = [e for e in engines if e not in ("duckdb", "pyiceberg", "spark")]
    if bad:
        ap.error(f"unknown engines {bad}; known: duckdb,pyiceberg,spark")

    # stdout is for the JSON alone: keep it, and send fd 1 (what a JVM started from here
    # inherits) to stderr.
    sys.stdout.flush()
    json_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    out: dict = {"metadata": path, "threads": args.threads, "versions": {"python": sys.version.split()[0]}}
    spark = None
    for engine in engines:
        try:
            if engine == "duckdb":
                import duckdb

                out["versions"]["duckdb"] = duckdb.__version__
                out["duckdb"] = run_duckdb(args, path, queries)
            elif engine == "pyiceberg":
                import pyiceberg

                out["versions"]["pyiceberg"] = pyiceberg.__version__
                out["pyiceberg"] = run_pyiceberg(args, uri, queries)
            elif engine == "spark":
                spark = spark_open(args, out)
                out["spark"] = run_spark(args, spark, path, queries, out["spark_setup"])
        except Exception as e:  # report and go on with the other engines
            msg = repr(e)  # a Java exception brings its whole stack trace: keep the head
            msg = msg if len(msg) <= 2000 else msg[:2000] + "..."
            log(f"{engine} failed: {msg}")
            out[engine] = {"error": msg}
    if spark is not None:
        try:
            spark.stop()
        except Exception as e:  # noqa: BLE001
            log(f"spark stop failed: {e!r}")
    json_out.write(json.dumps(out) + "\n")
    json_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
