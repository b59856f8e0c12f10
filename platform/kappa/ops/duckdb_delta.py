"""DuckDB with the Delta extension loaded from the `duckdb-extension-delta` wheel.

DuckDB normally downloads its extensions; these machines reach only package registries, so the extension
comes from PyPI and is loaded by path. Downstream teams use the same call to query the Delta tables.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import duckdb_extension_delta

from kappa.core.errors import KappaError


def delta_extension_path() -> Path:
    folder = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / "delta.duckdb_extension"
    if not path.is_file():
        raise KappaError(f"no Delta extension for DuckDB {duckdb.__version__} at {path} (pin duckdb-extension-delta)")
    return path


def connect(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(
        database, config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"}
    )
    con.execute(f"LOAD '{delta_extension_path()}'")
    return con
