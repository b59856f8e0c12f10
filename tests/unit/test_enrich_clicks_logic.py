"""The as-of rule on hand-made inputs, and its promise: any batching of a user's log gives the same answers."""

import random

from jobs.clickstream.generator import Click as GeneratedClick
from jobs.clickstream.generator import ProfileVersion, StreamConfig, clickstream
from jobs.enrich_clicks.logic import (
    MINUTE_MS,
    Click,
    PartitionClock,
    Profile,
    UserState,
    answer,
    enrich,
    state_from_json,
    state_to_json,
)

L = 20 * MINUTE_MS
D = 10 * MINUTE_MS


def _v(version: int, valid_from: int, log_time: int | None = None, segment: str = "FREE") -> Profile:
    return Profile(version, valid_from, valid_from if log_time is None else log_time, segment, "DE")


def _answers(changes_list: list) -> dict[str, int | None]:  # type: ignore[type-arg]
    final: dict[str, int | None] = {}
    for changes in changes_list:
        for a in changes.emit:
            final[a.click.event_id] = a.profile.profile_version if a.profile else None
    return final


def test_a_profile_update_between_two_clicks_gives_each_click_its_own_version() -> None:
    state = UserState()
    changes = enrich(state, [_v(1, 0), _v(2, 100_000, segment="PRO")], [Click("a", 50_000), Click("b", 150_000)], L, D)
    assert [(a.click.event_id, a.profile.profile_version if a.profile else None) for a in changes.emit] == [
        ("a", 1),
        ("b", 2),
    ]
    assert changes.emit[1].profile is not None
    assert changes.emit[1].profile.segment == "PRO"


def test_a_click_before_any_profile_is_unknown_then_corrected_when_its_version_arrives_in_time() -> None:
    state = UserState()
    first = enrich(state, [], [Click("a", 60_000)], L, D)
    assert [(a.click.event_id, a.profile) for a in first.emit] == [("a", None)]  # the documented rule: no profile
    # A version valid from before the click, published 5 minutes later (within L): the click is re-emitted.
    second = enrich(state, [_v(1, 30_000, log_time=60_000 + 5 * MINUTE_MS)], [], L, D)
    assert [(a.click.event_id, a.profile.profile_version if a.profile else None) for a in second.emit] == [("a", 1)]
    assert second.late_profiles == ()


def test_a_version_published_more_than_l_late_applies_only_from_its_log_time_minus_l() -> None:
    published = 200 * MINUTE_MS
    late = _v(2, valid_from=10 * MINUTE_MS, log_time=published, segment="PRO")
    profiles = [_v(1, 0), late]
    assert answer(11 * MINUTE_MS, profiles, L) == profiles[0]  # published 189 min after this click: not visible
    assert answer(published - L, profiles, L) == late  # visible from log_time - L on
    assert answer(published - L - 1, profiles, L) == profiles[0]


def test_a_version_arriving_after_its_clicks_were_settled_is_reported_late_and_still_applies_later() -> None:
    state = UserState()
    enrich(state, [_v(1, 0)], [Click("a", 10 * MINUTE_MS)], L, D)
    enrich(state, [], [Click("b", 60 * MINUTE_MS)], L, D)  # frontier 60 min: "a" (10 min) is settled
    assert "a" not in state.held
    assert state.settled_through_ms == 10 * MINUTE_MS
    breaking = _v(2, valid_from=5 * MINUTE_MS, log_time=12 * MINUTE_MS, segment="PRO")  # visible to "a"
    changes = enrich(state, [breaking], [Click("c", 61 * MINUTE_MS)], L, D)
    assert changes.late_profiles == (breaking,)
    assert _answers([changes]) == {"c": 2, "b": 2}  # applied to the held click and the new one, not counted silently


def test_redelivered_clicks_and_versions_change_nothing() -> None:
    state = UserState()
    first = enrich(state, [_v(1, 0)], [Click("a", 1_000)], L, D)
    again = enrich(state, [_v(1, 0)], [Click("a", 1_000)], L, D)
    assert _answers([first]) == _answers([again]) == {"a": 1}
    assert len(state.profiles) == 1


def test_the_state_survives_its_json_form() -> None:
    state = UserState()
    enrich(state, [_v(1, 0), _v(2, 5_000, 9_000)], [Click("a", 6_000, ("/p", None, "MOBILE"), stamp_ms=7_000)], L, D)
    assert state_from_json(state_to_json(state)) == state


def test_a_partition_stamps_each_click_with_its_latest_earlier_event_time_in_offset_order() -> None:
    clock = PartitionClock()
    # one partition's clicks in offset order, of two users, out of time order
    first = clock.stamp([Click("a", 5_000), Click("b", 3_000), Click("c", 9_000)])
    assert [c.stamp_ms for c in first] == [None, 5_000, 5_000]
    second = clock.stamp([Click("d", 1_000), Click("e", 9_000), Click("f", 12_000)])  # the next batch goes on
    assert [c.stamp_ms for c in second] == [9_000, 9_000, 9_000]
    assert clock.latest_ms == 12_000
    assert [(c.event_id, c.event_time_ms) for c in first] == [("a", 5_000), ("b", 3_000), ("c", 9_000)]


def test_a_re_emitted_click_keeps_its_own_stamp() -> None:
    state = UserState()
    enrich(state, [], [Click("a", 60_000, stamp_ms=50_000)], L, D)
    later = enrich(state, [_v(1, 0, 70_000)], [Click("b", 61_000, stamp_ms=90_000)], L, D)
    assert [(a.click.event_id, a.click.stamp_ms, a.profile.profile_version if a.profile else None)
            for a in later.emit] == [("b", 90_000, 1), ("a", 50_000, 1)]  # fmt: skip


def _user_logs(config: StreamConfig) -> dict[str, list[Profile | Click]]:
    logs: dict[str, list[Profile | Click]] = {}
    for e in clickstream(config):
        r = e.record
        if isinstance(r, GeneratedClick):
            logs.setdefault(r.user_id, []).append(Click(r.event_id, r.event_time_ms))
        elif isinstance(r, ProfileVersion):
            logs.setdefault(r.user_id, []).append(
                Profile(r.profile_version, r.valid_from_ms, e.log_time_ms, r.segment, r.country)
            )
    return logs


def test_any_batching_and_any_interleaving_within_d_gives_the_rule_over_the_whole_log() -> None:
    config = StreamConfig(events=6000, users=20, seed=5, profile_change_share=0.05, late_profile_share=0.5)
    rng = random.Random(11)
    for user, log in _user_logs(config).items():
        profiles = [r for r in log if isinstance(r, Profile)]
        clicks = [r for r in log if isinstance(r, Click)]
        expected = {
            c.event_id: (
                v.profile_version
                if (v := answer(c.event_time_ms, sorted(profiles, key=lambda p: p.order), L))
                else None
            )
            for c in clicks
        }
        for _ in range(5):
            # Cut the clicks at random; profiles reach the job up to D/2 after the batch's clicks (within the contract).
            state, results = UserState(), []
            c_cuts = sorted(rng.sample(range(len(clicks) + 1), min(12, len(clicks) + 1)))
            p_at = 0
            for i, c_end in enumerate([*c_cuts, len(clicks)]):
                c_start = 0 if i == 0 else c_cuts[i - 1]
                batch_clicks = clicks[c_start:c_end]
                horizon = max((c.event_time_ms for c in batch_clicks), default=0) + D // 2
                p_end = p_at
                while p_end < len(profiles) and profiles[p_end].log_time_ms <= horizon:
                    p_end += 1
                results.append(enrich(state, profiles[p_at:p_end], batch_clicks, L, D))
                p_at = p_end
            results.append(enrich(state, profiles[p_at:], [], L, D))
            assert _answers(results) == expected, user
            assert all(not r.late_profiles for r in results)
