"""Quota values as the quota APIs take them and as Kafka stores them.

AlterClientQuotas carries every value as a float64. Kafka (ZooKeeper mode)
checks it against the key's type and stores its text in the entity's
config: byte rates are whole numbers (``producer_byte_rate`` = ``"1024"``; a
value more than 1e-6 from a whole number is refused), the others are doubles
written as Java's ``Double.toString`` writes them (``"50.0"``, ``"1.0E7"``).
"""

from __future__ import annotations

import math
from decimal import Decimal

from kbroker.quota.manager import LONG_QUOTA_KEYS

_EPSILON = 1e-6


class QuotaValueError(ValueError):
    """A value the key cannot take; the text says why, as Kafka says it."""


def stored_quota_text(key: str, value: float) -> str:
    """The text Kafka stores for ``key`` = ``value``; QuotaValueError when it cannot be."""
    if not math.isfinite(value):
        raise QuotaValueError(f"Configuration {key} must be a finite number, not {value}")
    if key in LONG_QUOTA_KEYS:
        whole = math.trunc(value + _EPSILON)
        if abs(whole - value) > _EPSILON or not -(2**63) <= whole < 2**63:
            raise QuotaValueError(f"Configuration {key} must be a LONG value")
        return str(whole)
    return java_double_text(value)


def java_double_text(value: float) -> str:
    """Java's Double.toString for a finite double (the shortest digits that read back)."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    digits_tuple = Decimal(repr(magnitude)).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits))
    exponent = int(digits_tuple.exponent)
    # value = 0.<digits> * 10^(point), with point the position of the decimal point
    point = len(digits) + exponent
    if 1e-3 <= magnitude < 1e7:
        if point <= 0:
            text = "0." + "0" * -point + digits
        elif point >= len(digits):
            text = digits + "0" * (point - len(digits)) + ".0"
        else:
            text = digits[:point] + "." + digits[point:]
        return sign + text
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{point - 1}"
