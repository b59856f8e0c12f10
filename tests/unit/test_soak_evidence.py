"""What the soak keeps when an output differs from the independent answer: the stack is purged after the run, so
the differing keys and the events of the users they name must be written down before it goes."""

from collections.abc import Mapping
from typing import Any

from tests.benchmarks.soak_exactness import evidence


def test_the_evidence_names_each_difference_and_the_events_of_its_user() -> None:
    events = [  # (event_id, user, page, time, segment) in log order
        ("e1", "u1", "/a", 5, "FREE"),
        ("e2", "u2", "/b", 5, "PRO"),
        ("e3", "u1", "/c", 5, "FREE"),
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
