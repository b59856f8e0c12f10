from collections import Counter

from kappa.generate import clicks
from kappa.partitioning import partition_for


def test_same_seed_same_events() -> None:
    assert list(clicks(500, seed=3)) == list(clicks(500, seed=3))
    assert list(clicks(500, seed=3)) != list(clicks(500, seed=4))


def test_event_time_never_goes_back_for_a_user_and_ids_are_unique() -> None:
    events = list(clicks(5000, users=50, seed=1))
    assert len({e.event_id for e in events}) == len(events)
    last: dict[str, int] = {}
    for e in events:
        assert e.event_time_ms > last.get(e.user_id, 0)
        last[e.user_id] = e.event_time_ms


def test_page_popularity_is_skewed() -> None:
    counts = Counter(e.page for e in clicks(20_000, pages=100, seed=2))
    top, tenth = counts["/page/0000"], counts["/page/0009"]
    assert top > 5 * tenth  # Zipf: the first page is far more popular than the tenth


def test_partition_is_a_pure_function_of_the_user() -> None:
    assert partition_for("user-00001", 4) == partition_for("user-00001", 4)
    assert {partition_for(f"user-{i}", 4) for i in range(100)} == {0, 1, 2, 3}
