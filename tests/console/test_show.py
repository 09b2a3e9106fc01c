"""How the console shows record bytes: formats, the size bound, the fallbacks."""

from __future__ import annotations

import json

import pytest

from kbroker.console.show import show


def test_auto_picks_json_then_text_then_hex() -> None:
    doc = {"k": [1, {"x": "é"}]}
    pretty = show(json.dumps(doc).encode(), "auto", 1000)
    assert (pretty.text, pretty.format, pretty.cut) == (
        json.dumps(doc, indent=2, ensure_ascii=False),
        "json",
        False,
    )
    assert show(b"plain words", "auto", 1000).format == "text"
    assert show(b"\xff\x00", "auto", 1000) == show(b"\xff\x00", "hex", 1000)
    assert show(b"\xff\x00", "hex", 1000).text == "ff 00"


def test_json_that_does_not_parse_is_shown_as_text() -> None:
    shown = show(b'{"cut": ', "json", 1000)
    assert (shown.text, shown.format) == ('{"cut": ', "text")


def test_a_long_field_is_cut_and_keeps_its_full_size() -> None:
    value = "é".encode() * 10  # 20 bytes; the cut falls inside a character
    shown = show(value, "text", 5)
    assert (shown.text, shown.size, shown.cut) == ("éé\ufffd", 20, True)
    hexed = show(bytes(range(10)), "hex", 4)
    assert (hexed.text, hexed.size, hexed.cut) == ("00 01 02 03", 10, True)
    assert not show(b"abcd", "text", 4).cut


def test_null_and_unknown_formats() -> None:
    assert show(None, "auto", 10).text is None
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        show(b"x", "xml", 10)
