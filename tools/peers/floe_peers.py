"""Shared helpers for the floe peer harness: open DuckDB with the iceberg
extension loaded offline from the pinned wheels, and build the local Spark
session with the Iceberg runtime jar shipped on PyPI.

Import from scripts in tools/peers or tools/fixtures (run with the peer venv's
python, see setup.sh)."""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

RUNTIME_JAR_NAME = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def _package_dir(mod: str) -> str:
    spec = importlib.util.find_spec(mod)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"python package {mod!r} is not installed in {sys.prefix}; run tools/peers/setup.sh")
    return list(spec.submodule_search_locations)[0]


def duckdb_extension_path(name: str) -> str:
    """Path of `<name>.duckdb_extension` inside the duckdb-extension-<name> wheel."""
    import duckdb

    pkg = _package_dir(f"duckdb_extension_{name}")
    want = os.path.join(pkg, "extensions", f"v{duckdb.__version__}", f"{name}.duckdb_extension")
    if os.path.exists(want):
        return want
    found = sorted(glob.glob(os.path.join(pkg, "**", f"{name}.duckdb_extension"), recursive=True))
    if not found:
        raise RuntimeError(f"no {name}.duckdb_extension under {pkg}")
    raise RuntimeError(
        f"{name} extension in {pkg} does not match duckdb {duckdb.__version__}: found {found}"
    )


def duckdb_connect(httpfs: bool = False):
    """In-memory DuckDB connection with avro + iceberg (+ httpfs) loaded by path.

    Never touches the network or ~/.duckdb. Session time zone is UTC so that
    timestamptz values come back as UTC instants."""
    import duckdb

    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    # Order matters: iceberg's init tries to auto-install avro if it is not loaded yet.
    names = ["avro", "iceberg"] + (["httpfs"] if httpfs else [])
    for n in names:
        con.execute(f"LOAD '{duckdb_extension_path(n)}'")
    con.execute("SET TimeZone='UTC'")
    return con


def spark_runtime_jar() -> str:
    pkg = _package_dir("snowpark_connect_deps_iceberg")
    found = sorted(glob.glob(os.path.join(pkg, "**", RUNTIME_JAR_NAME), recursive=True))
    if not found:
        raise RuntimeError(f"{RUNTIME_JAR_NAME} not found under {pkg}")
    return found[0]


def spark_session(warehouse: str | None = None, app: str = "floe-peers", conf: dict[str, str] | None = None):
    """One local[2] Spark session with the Iceberg extensions; optional hadoop
    catalog `local` rooted at `warehouse`. Everything pinned to UTC. `conf`: extra
    Spark settings, applied last (so they override the defaults here, e.g.
    `{"spark.driver.memory": "4g"}`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    jvm_opts = "-Duser.timezone=UTC"
    b = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", spark_runtime_jar())
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", jvm_opts)
        .config("spark.executor.extraJavaOptions", jvm_opts)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
    )
    if warehouse is not None:
        b = (
            b.config("spark.sql.catalog.local", "org.apache.iceberg.spark.SparkCatalog")
            .config("spark.sql.catalog.local.type", "hadoop")
            .config("spark.sql.catalog.local.warehouse", warehouse)
        )
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
