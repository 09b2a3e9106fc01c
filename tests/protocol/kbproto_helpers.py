"""Shared test helpers: hypothesis strategies derived from the declarations,
the kafka-python class lookup, and the list of every (api, version)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from hypothesis import strategies as st

from kbroker.protocol import APIS, ZERO_UUID
from kbroker.protocol.apis import ApiSpec
from kbroker.protocol.schema import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UINT32,
    UUID,
    Array,
    Primitive,
)

_INT_RANGES = {
    INT8: (-(2**7), 2**7 - 1),
    INT16: (-(2**15), 2**15 - 1),
    UINT16: (0, 2**16 - 1),
    INT32: (-(2**31), 2**31 - 1),
    UINT32: (0, 2**32 - 1),
    INT64: (-(2**63), 2**63 - 1),
}


def every_version() -> list[tuple[ApiSpec, int]]:
    return [(s, v) for s in APIS for v in range(s.min_version, s.max_version + 1)]


def value_st(t: Any, version: int, flex: bool, nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(t, Primitive):
        if t in _INT_RANGES:
            lo, hi = _INT_RANGES[t]
            s: st.SearchStrategy[Any] = st.integers(lo, hi) | st.sampled_from([lo, hi, -1, 0])
        elif t is BOOL:
            s = st.booleans()
        elif t is FLOAT64:
            s = st.floats(allow_nan=False)
        elif t is UUID:
            s = st.just(ZERO_UUID) | st.uuids()
        elif t is STRING:
            s = st.text(max_size=8)
        elif t is BYTES:
            s = st.binary(max_size=12)
        elif t is RECORDS:
            s = st.binary(max_size=40)
        else:  # pragma: no cover
            raise AssertionError(t)
    elif isinstance(t, Array):
        s = st.lists(value_st(t.element, version, flex, False), max_size=3)
    else:
        s = message_st(t, version, flex)
    return st.none() | s if nullable else s


def message_st(cls: Any, version: int, flex: bool) -> st.SearchStrategy[Any]:
    kwargs = {}
    for f in cls._schema.fields:
        if not f.present(version) or (f.tag is not None and not flex):
            continue
        s = value_st(f.type, version, flex, f.nullable_at(version))
        if f.tag is not None and f.default is None and not f.nullable_at(version):
            s = st.none() | s
        kwargs[f.name] = s
    return st.builds(cls, **kwargs)


_KP: dict[tuple[int, str], Any] | None = None


def kafka_python_class(api_key: int, kind: str) -> Any:
    """kafka-python 3.0's independent implementation of an API, or None."""
    global _KP
    if _KP is None:
        import kafka.protocol as kp
        from kafka.protocol.api_message import ApiMessage

        _KP = {}
        for m in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
            if "generate_stubs" in m.name:
                continue
            try:
                mod = importlib.import_module(m.name)
            except Exception:
                continue
            for _, c in inspect.getmembers(mod, inspect.isclass):
                if issubclass(c, ApiMessage) and c is not ApiMessage and getattr(c, "_json", None):
                    _KP[(c.API_KEY, c.type)] = c
    return _KP.get((api_key, kind))
