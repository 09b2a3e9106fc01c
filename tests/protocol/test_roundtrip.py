"""Property tests: every declared (api, version) round-trips through kbroker's codec."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kbproto_helpers import every_version, message_st

from kbroker.protocol import RecordsPlaceholder, api
from kbroker.protocol.codec import segments_size

CASES = [
    pytest.param(int(spec.key), version, kind, id=f"{spec.name}-v{version}-{kind}")
    for spec, version in every_version()
    for kind in ("request", "response")
]


@pytest.mark.parametrize(("key", "version", "kind"), CASES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip(key: int, version: int, kind: str, data: st.DataObject) -> None:
    spec = api(key)
    codec = spec.request_codec(version) if kind == "request" else spec.response_codec(version)
    msg = data.draw(message_st(codec.message, version, codec.flexible))
    wire = codec.encode(msg)
    decoded = codec.decode(wire)
    assert decoded == msg
    assert codec.encode(decoded) == wire
    # the segmented form carries the same bytes
    segs = codec.encode_segments(msg)
    assert b"".join(bytes(s) for s in segs) == wire
    assert segments_size(segs) == len(wire)


def _swap_records(obj: Any, found: list[bytes]) -> None:
    """Replace each non-empty records value with a placeholder, remembering the bytes."""
    for f in obj._schema.fields:
        v = getattr(obj, f.name, None)
        if f.name == "records" and v:
            found.append(bytes(v))
            setattr(obj, f.name, RecordsPlaceholder(len(v), source=len(found) - 1))
        elif isinstance(v, list):
            for x in v:
                if hasattr(x, "_schema"):
                    _swap_records(x, found)


@pytest.mark.parametrize("version", range(api(1).min_version, api(1).max_version + 1))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_fetch_segments_equal_plain_encoding(version: int, data: st.DataObject) -> None:
    codec = api(1).response_codec(version)
    msg = data.draw(message_st(codec.message, version, codec.flexible))
    plain = codec.encode(msg)
    records: list[bytes] = []
    _swap_records(msg, records)
    segs = codec.encode_segments(msg)
    placeholders = [s for s in segs if isinstance(s, RecordsPlaceholder)]
    assert [p.source for p in placeholders] == list(range(len(records)))
    # framing segments and placeholders alternate: never two bytes segments in a row
    kinds = [isinstance(s, RecordsPlaceholder) for s in segs]
    assert all(not (a is False and b is False) for a, b in itertools.pairwise(kinds))
    rebuilt = b"".join(
        records[s.source] if isinstance(s, RecordsPlaceholder) else bytes(s) for s in segs
    )
    assert rebuilt == plain
