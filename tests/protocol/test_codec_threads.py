"""Codecs are generated on first use; threads that use one at once all get a working one
(a threaded client, such as bench/wire.py's connections, decodes its first answers together)."""

from __future__ import annotations

import sys
import threading
from typing import Any

from kbroker.protocol.codec import Codec
from kbroker.protocol.schema import INT16, INT32, STRING, Array, F, message


def fresh_message(n: int) -> tuple[Any, Any, Any]:
    """Message types no codec was made for yet (outer, middle, inner): a few levels of nested
    arrays, so that generating them takes long enough for threads to meet inside it."""
    inner = message(f"Inner{n}", F("a", INT32), F("b", STRING), F("c", Array(INT16)))
    middle = message(f"Middle{n}", F("x", INT32), F("items", Array(inner)))
    outer = message(
        f"Outer{n}", F("id", INT32), F("groups", Array(middle)), F("more", Array(inner))
    )
    return outer, middle, inner


def test_threads_making_the_same_codec_at_once_all_get_a_working_one() -> None:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for round_ in range(20):
            cls, middle, inner = fresh_message(round_)
            value = cls(
                id=7,
                groups=[middle(x=1, items=[inner(a=2, b="b", c=[3, 4])])],
                more=[inner(a=5, b="e", c=[])],
            )
            start = threading.Barrier(8)
            failures: list[BaseException] = []

            def use(
                cls: Any = cls,
                value: Any = value,
                start: threading.Barrier = start,
                failures: list[BaseException] = failures,
            ) -> None:
                try:
                    start.wait()
                    for flexible in (False, True):
                        codec = Codec(cls, 0, flexible)
                        assert codec.decode(codec.encode(value)) == value
                except BaseException as exc:  # reported by the test thread
                    failures.append(exc)

            threads = [threading.Thread(target=use) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert not failures, f"round {round_}: {failures[0]!r}"
    finally:
        sys.setswitchinterval(old)
