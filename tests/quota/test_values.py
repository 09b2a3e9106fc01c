"""Quota values as Kafka stores them."""

from __future__ import annotations

import pytest

from kbroker.quota.values import QuotaValueError, java_double_text, stored_quota_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (50.0, "50.0"),
        (0.5, "0.5"),
        (123.456, "123.456"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (12345678.0, "1.2345678E7"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (-2.5, "-2.5"),
        (0.0, "0.0"),
    ],
)
def test_doubles_are_written_as_javas_double_to_string(value: float, text: str) -> None:
    assert java_double_text(value) == text


def test_byte_rates_are_whole_numbers() -> None:
    assert stored_quota_text("producer_byte_rate", 1024.0) == "1024"
    assert stored_quota_text("consumer_byte_rate", 1024.0000001) == "1024"
    with pytest.raises(QuotaValueError, match="must be a LONG value"):
        stored_quota_text("producer_byte_rate", 1024.5)
    with pytest.raises(QuotaValueError):
        stored_quota_text("producer_byte_rate", float("nan"))
    assert stored_quota_text("request_percentage", 50.0) == "50.0"
