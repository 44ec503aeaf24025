"""Post-install check for the peer venv (called by setup.sh).

Checks, without network: DuckDB extensions load from the wheels (avro first)
and the iceberg table functions exist; pyiceberg + pyiceberg-core import;
chdb runs ClickHouse 26.9 in-process;
with --spark, the Iceberg Spark runtime jar exists and is the complete build
(shaded Jackson present), and pyspark imports. Exits non-zero on failure."""

import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floe_peers  # noqa: E402


def main() -> int:
    want_spark = "--spark" in sys.argv[1:]
    import duckdb

    con = floe_peers.duckdb_connect(httpfs=True)
    n = con.execute(
        "SELECT count(*) FROM duckdb_functions() WHERE function_name IN ('iceberg_scan','iceberg_snapshots','iceberg_metadata')"
    ).fetchone()[0]
    if n < 3:
        print(f"FAIL: iceberg table functions missing after LOAD (found {n})")
        return 1
    print(f"ok duckdb {duckdb.__version__}: avro+iceberg+httpfs load offline")

    import pyarrow
    import pyiceberg
    import pyiceberg_core  # noqa: F401  (needed to write bucket/truncate partitions)
    import pytz  # noqa: F401
    import psycopg2  # noqa: F401  (pyiceberg's SqlCatalog on PostgreSQL)

    print(f"ok pyiceberg {pyiceberg.__version__}, pyarrow {pyarrow.__version__}, pyiceberg-core, psycopg2 {psycopg2.__version__.split()[0]}")

    import chdb

    ch = str(chdb.query("SELECT version()", "CSV")).strip().strip('"')
    if not ch.startswith("26.9."):
        print(f"FAIL: chdb {chdb.__version__} runs ClickHouse {ch!r}, expected 26.9.x")
        return 1
    print(f"ok chdb {chdb.__version__}: ClickHouse {ch} in-process")

    if want_spark:
        import pyspark

        jar = floe_peers.spark_runtime_jar()
        with zipfile.ZipFile(jar) as z:
            names = set(z.namelist())
        needed = "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class"
        if needed not in names:
            print(f"FAIL: {jar} lacks {needed} (stripped runtime jar; pin snowpark-connect-deps-iceberg==1.0.2)")
            return 1
        print(f"ok pyspark {pyspark.__version__}; runtime jar {jar} ({os.path.getsize(jar) // 1048576} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
