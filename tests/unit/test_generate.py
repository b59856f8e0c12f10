from collections import Counter

from jobs.clickstream.generator import clicks
from kappa.kafka.partitioning import partition_for


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


def _stream(**overrides: object) -> list:  # type: ignore[type-arg]
    from jobs.clickstream.generator import StreamConfig, clickstream

    return list(clickstream(StreamConfig(**{"events": 20_000, "users": 200, "seed": 3, **overrides})))  # type: ignore[arg-type]


def test_clickstream_is_deterministic_and_complete() -> None:
    from jobs.clickstream.generator import Click

    first, second = _stream(), _stream()
    assert first == second
    click_ids = [e.record.event_id for e in first if isinstance(e.record, Click)]
    assert len(click_ids) == len(set(click_ids)) == 20_000
    assert [e.log_time_ms for e in first] == sorted(e.log_time_ms for e in first)  # log order


def test_events_arrive_out_of_order_and_some_very_late() -> None:
    from jobs.clickstream.generator import Click

    stream = _stream(late_share=0.02, late_by_ms=45 * 60_000)
    latest_seen: dict[str, int] = {}
    behind = []
    for e in stream:
        if isinstance(e.record, Click):
            user, at = e.record.user_id, e.record.event_time_ms
            behind.append(latest_seen.get(user, at) - at)
            latest_seen[user] = max(latest_seen.get(user, at), at)
    out_of_order = sum(b > 0 for b in behind)
    very_late = sum(b > 30 * 60_000 for b in behind)
    assert out_of_order > 0.01 * len(behind)
    assert 0 < very_late < 0.03 * len(behind)


def test_profiles_change_and_some_arrive_after_later_clicks() -> None:
    from jobs.clickstream.generator import Click, ProfileVersion

    stream = _stream()
    versions: dict[str, list[int]] = {}
    first_click: dict[str, int] = {}
    clicks_logged: dict[str, list[int]] = {}
    arrived_after_later_click = 0
    for e in stream:
        r = e.record
        if isinstance(r, ProfileVersion):
            versions.setdefault(r.user_id, []).append(r.profile_version)
            # A click of this user that happened after valid_from was already in the log.
            arrived_after_later_click += any(t >= r.valid_from_ms for t in clicks_logged.get(r.user_id, []))
        elif isinstance(r, Click):
            first_click.setdefault(r.user_id, r.event_time_ms)
            clicks_logged.setdefault(r.user_id, []).append(r.event_time_ms)
    assert all(sorted(v) == list(range(1, len(v) + 1)) for v in versions.values())  # no gaps, no repeats
    assert any(v != sorted(v) for v in versions.values())  # a late version can arrive after a newer one
    assert sum(len(v) > 1 for v in versions.values()) > 10  # profiles do change
    assert arrived_after_later_click > 0  # the as-of join has corrections to make
    profiled_first = {
        u: min(p.record.valid_from_ms for p in stream if isinstance(p.record, ProfileVersion) and p.record.user_id == u)
        for u in versions
    }
    assert any(profiled_first[u] > first_click[u] for u in profiled_first)  # clicks before any profile
