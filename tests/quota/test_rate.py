"""Rate windows and throttle times, as Kafka's Rate and QuotaUtils compute them."""

from __future__ import annotations

import pytest

from kbroker.quota.rate import Rate, throttle_time_ms


def test_a_new_client_is_measured_over_samples_minus_one_windows() -> None:
    rate = Rate(11, 1000)
    rate.record(1000, 0)
    # 1000 bytes over the 10 whole windows a fresh rate assumes.
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)
    # Half a second later: 10 whole windows plus the half of the current one.
    assert rate.window_size_ms(500) == 10_500
    assert rate.measure(500) == pytest.approx(1000 / 10.5)


def test_the_window_grows_past_samples_minus_one_with_elapsed_time() -> None:
    rate = Rate(3, 1000)
    for t in range(0, 2500, 100):
        rate.record(10, t)
    # Windows start at 0, 1000, 2000: 2.5 s elapsed since the oldest.
    assert rate.window_size_ms(2500) == 2500
    assert rate.total(2500) == 250
    assert rate.measure(2500) == pytest.approx(100.0)


def test_old_windows_are_reused_and_expire() -> None:
    rate = Rate(2, 1000)
    rate.record(100, 0)
    rate.record(100, 1000)
    rate.record(100, 2000)
    rate.record(100, 3000)  # reuses the slot of the window of t=0 (samples + 1 slots)
    # Windows last written samples * window ago are reset when measured: t=0 and t=1000.
    assert rate.total(3000) == 200
    # Nothing recorded for samples * window: everything is forgotten.
    assert rate.total(3000 + 2000) == 0
    assert rate.measure(10_000) == 0


def test_throttle_time_is_kip_219s() -> None:
    rate = Rate(11, 1000)
    rate.record(1000, 0)  # 100 bytes/s measured over 10 s
    assert throttle_time_ms(rate, 100.0, 0) == 0
    # 100 measured against 50: (100 - 50) / 50 * 10 s
    assert throttle_time_ms(rate, 50.0, 0) == 10_000
    # against 80: 0.25 * 10 s
    assert throttle_time_ms(rate, 80.0, 0) == 2_500


def test_throttle_times_round_as_javas_math_round() -> None:
    rate = Rate(2, 1000)
    rate.record(3, 0)  # 3 per second over the 1 s minimum
    # (3 - 2) / 2 * 1000 = 500 exactly; (3 - 1.6) / 1.6 * 1000 = 875
    assert throttle_time_ms(rate, 2.0, 0) == 500
    assert throttle_time_ms(rate, 1.6, 0) == 875


def test_a_bound_of_zero_throttles_for_the_whole_span() -> None:
    rate = Rate(11, 1000)
    rate.record(1, 0)
    assert throttle_time_ms(rate, 0.0, 0) == 11_000


def test_holding_a_client_to_its_throttle_times_holds_its_rate() -> None:
    """A client that sends as fast as allowed and waits out each throttle time averages
    its quota once the first window has passed."""
    bound = 1000.0  # per second
    rate = Rate(5, 1000)
    now = 0.0
    sent = 0.0
    sent_after_warmup = 0.0
    while now < 60_000:
        rate.record(200, now)
        sent += 200
        if now >= 10_000:
            sent_after_warmup += 200
        now += max(throttle_time_ms(rate, bound, now), 1)
    assert sent_after_warmup / 50 == pytest.approx(bound, rel=0.05)
