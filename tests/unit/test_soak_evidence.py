"""How the soak compares an output with the independent answer (in DuckDB: an hour's log is too big for Python
objects), and what it keeps when they differ: the stack is purged after the run, so the differing keys and the
events of the users they name must be written down before it goes."""

from collections.abc import Mapping
from typing import Any

import duckdb

from tests.benchmarks.soak_exactness import compare, evidence


def test_the_comparison_counts_each_kind_of_difference() -> None:
    con = duckdb.connect()
    con.execute("""
        CREATE TABLE expected (page TEXT, hour BIGINT, views BIGINT, median BIGINT);
        INSERT INTO expected VALUES ('/a', 0, 3, NULL), ('/b', 0, 2, 7), ('/c', 0, 1, 1), ('/d', 0, 1, 1);
        CREATE TABLE found (page TEXT, hour BIGINT, views BIGINT, median BIGINT);
        -- /a the same (a NULL equals a NULL), /b different, /c missing, /d twice, /e only found
        INSERT INTO found VALUES ('/a', 0, 3, NULL), ('/b', 0, 2, 8), ('/d', 0, 1, 1), ('/d', 0, 1, 1), ('/e', 0, 1, 1);
    """)  # fmt: skip
    row = compare(con, "page_stats", ["page", "hour"], "expected", "found")
    assert {k: row[k] for k in ("expected", "found", "missing_or_different", "unexpected", "doubled", "exact")} == {
        "expected": 4, "found": 5, "missing_or_different": 2, "unexpected": 1, "doubled": 1, "exact": "NO"
    }  # fmt: skip
    found, expected = row["compared"]
    assert expected == {("/b", 0): (2, 7), ("/c", 0): (1, 1)}
    assert found == {("/b", 0): (2, 8), ("/e", 0): (1, 1)}
    con.execute("DELETE FROM found WHERE page IN ('/b', '/d', '/e'); INSERT INTO found VALUES ('/b', 0, 2, 7), "
                "('/c', 0, 1, 1), ('/d', 0, 1, 1)")  # fmt: skip
    assert compare(con, "page_stats", ["page", "hour"], "expected", "found")["exact"] == "yes"


def test_the_evidence_names_each_difference_and_the_events_of_its_user() -> None:
    events = [  # (position, event_id, user, page, time, segment) in log order
        (0, "e1", "u1", "/a", 5, "FREE"),
        (1, "e2", "u2", "/b", 5, "PRO"),
        (2, "e3", "u1", "/c", 5, "FREE"),
    ]
    compared: dict[str, tuple[Mapping[Any, Any], Mapping[Any, Any]]] = {
        "sessions table": (
            {"u1:e1": ("u1", 5, 5, 2, 2, "/a", "/a", "FREE"), "u2:e2": ("u2", 5, 5, 1, 1, "/b", "/b", "PRO")},
            {"u1:e1": ("u1", 5, 5, 2, 2, "/a", "/c", "FREE"), "u2:e2": ("u2", 5, 5, 1, 1, "/b", "/b", "PRO")},
        ),
        "page_stats": ({("/a", 0): (1, 1, None)}, {("/a", 0): (1, 1, None)}),
        "enriched_clicks": ({"e2": ("u2", "/b"), "e9": ("u9", "/z")}, {"e2": ("u2", "/b")}),  # e9: only found
    }
    kept = evidence(compared, events)
    assert kept["outputs"] == {
        "sessions table": [
            {
                "key": "'u1:e1'",
                "expected": ("u1", 5, 5, 2, 2, "/a", "/c", "FREE"),
                "found": ("u1", 5, 5, 2, 2, "/a", "/a", "FREE"),
            }
        ],
        "page_stats": [],
        "enriched_clicks": [{"key": "'e9'", "expected": None, "found": ("u9", "/z")}],
    }
    assert kept["events_of"] == {  # u1's events alone, with their log positions: the tie at time 5 shows
        "u1": [
            {"position": 0, "event_id": "e1", "page": "/a", "time_ms": 5, "segment": "FREE"},
            {"position": 2, "event_id": "e3", "page": "/c", "time_ms": 5, "segment": "FREE"},
        ]
    }
