"""Platform operators: per-key stateful rules that run in the JVM (infra/jvm/operators), called from Python.

A job's rule in jobs/<job>/logic.py is the specification; an operator here runs the same rule as a Spark
`transformWithState` processor, without a Python call per key or per record, and a differential test holds
the two equal (tests/integration/test_operators_differential.py). Job code calls these functions and never
sees the JVM.

A rule that needs per-key state but not the JVM's speed is written in Python instead: a `KeyedRule`, run by
`keyed_rule` with Spark's Python `transformWithState` (python_rule.py).
"""

from kappa.operators.as_of_join import AsOfJoinColumns, as_of_join, as_of_rows
from kappa.operators.page_stats import page_stats
from kappa.operators.python_rule import KeyedRule, keyed_rule
from kappa.operators.sessions import sessions
from kappa.operators.user_activity import user_activity

__all__ = [
    "AsOfJoinColumns",
    "KeyedRule",
    "as_of_join",
    "as_of_rows",
    "keyed_rule",
    "page_stats",
    "sessions",
    "user_activity",
]
