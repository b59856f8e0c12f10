"""Platform operators: per-key stateful rules that run in the JVM (infra/jvm/operators), called from Python.

A job's rule in jobs/<job>/logic.py is the specification; an operator here runs the same rule as a Spark
`transformWithState` processor, without a Python call per key or per record, and a differential test holds
the two equal (tests/integration/test_operators_differential.py). Job code calls these functions and never
sees the JVM.
"""

from kappa.operators.as_of_join import AsOfJoinColumns, as_of_join, as_of_rows
from kappa.operators.page_stats import page_stats
from kappa.operators.sessions import sessions
from kappa.operators.user_activity import user_activity

__all__ = ["AsOfJoinColumns", "as_of_join", "as_of_rows", "page_stats", "sessions", "user_activity"]
