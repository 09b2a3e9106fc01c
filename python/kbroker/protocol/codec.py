"""The one generic compiler from message declarations to flat codec functions.

For each (message class, version, flexible) it generates Python source for a
decoder ``d(buf, pos, end) -> (obj, pos)`` and an encoder ``e(obj, out)``
that appends bytes to a list, runs it through exec once, and caches it.
Consecutive fixed-width fields share one precompiled `struct.Struct`.

Decoders check every declared length or count against the bytes remaining
before building anything, refuse strings longer than Kafka reads (32767
bytes), and every failure on bad input surfaces as `ProtocolDecodeError`.
`Codec` is the public face of one compiled pair.

Records fields have a second encoder flavour for zero-copy sends:
`Codec.encode_segments()` returns ``[bytes, records, bytes, records, ...]``
where each records item is the object the caller put in the field (bytes,
memoryview or a `RecordsPlaceholder`) so the server can write framing bytes
through the transport and the record bytes with sendfile.
"""

from __future__ import annotations

import itertools
import struct
import threading
import uuid
from collections.abc import Callable
from typing import Any

from .errors import ProtocolDecodeError, ProtocolEncodeError
from .schema import (
    BYTES,
    RECORDS,
    STRING,
    UUID,
    ZERO_UUID,
    Array,
    Field,
    Message,
    Primitive,
)


class RecordsPlaceholder:
    """Stands for `length` record bytes that the server writes itself.

    Put one in a records field and call `Codec.encode_segments` (or
    `headers.encode_response_segments`): the length prefix is written into
    the framing bytes and the placeholder is returned in its place. `source`
    is free for the caller (e.g. a file, offset pair for sendfile).
    """

    __slots__ = ("length", "source")

    def __init__(self, length: int, source: Any = None) -> None:
        if length < 0:
            raise ValueError("length must be >= 0")
        self.length = length
        self.source = source

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"RecordsPlaceholder(length={self.length}, source={self.source!r})"


Segment = bytes | bytearray | memoryview | RecordsPlaceholder

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_UV1 = tuple(bytes((i,)) for i in range(128))
_Z16 = bytes(16)


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """Unsigned varint at pos (at most 5 bytes) -> (value, new pos)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 35:
            raise ProtocolDecodeError("unsigned varint longer than 5 bytes")


def uvarint(n: int) -> bytes:
    """Encode a non-negative int as an unsigned varint."""
    if 0 <= n < 128:
        return _UV1[n]
    if n < 0:
        raise ProtocolEncodeError(f"negative varint {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _to_uuid(b: bytes) -> uuid.UUID:
    return ZERO_UUID if b == _Z16 else uuid.UUID(bytes=b)


# Everything bad input can make generated decoders raise.
# The longest string Kafka reads (its generated readers refuse more, in every version).
MAX_STRING_BYTES = 0x7FFF

_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError, TypeError)

_NS: dict[str, Any] = {
    "_I16": _I16,
    "_I32": _I32,
    "_uv": read_uvarint,
    "_uvb": uvarint,
    "_UV1": _UV1,
    "_uuid": _to_uuid,
    "_ZERO": ZERO_UUID,
    "_Bad": ProtocolDecodeError,
    "_EncErr": ProtocolEncodeError,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
}
_ids = itertools.count()
# Generated functions by their key, published once defined: a thread that finds a name here
# can call it. They are generated under _BUILDING, one thread at a time; _BUILDING_NAMES
# holds the names being generated, for a struct that holds itself.
_DEC: dict[tuple[type, int, bool], str] = {}
_ENC: dict[tuple[type, int, bool, bool], str] = {}
_BUILDING = threading.RLock()
_BUILDING_NAMES: dict[tuple[Any, ...], str] = {}


def _is_struct(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, Message)


def _has_records(cls: type[Message], version: int) -> bool:
    for f in cls._schema.fields:
        if not f.present(version):
            continue
        t = f.type.element if isinstance(f.type, Array) else f.type
        if t is RECORDS or (_is_struct(t) and _has_records(t, version)):
            return True
    return False


def _min_size(t: Any, version: int, flex: bool) -> int:
    """Fewest bytes one value of type t can take on the wire (>= 1)."""
    if isinstance(t, Primitive):
        if t.fmt:
            return t.size
        return 1 if flex else (2 if t is STRING else 4)
    if isinstance(t, Array):
        return 1 if flex else 4
    size = 1 if flex else 0
    for f in t._schema.fields:
        if f.present(version) and f.tag is None:
            nullable_struct = _is_struct(f.type) and f.nullable_at(version)
            size += 1 if nullable_struct else _min_size(f.type, version, flex)
    return max(size, 1)


def _default_expr(f: Field) -> str:
    d = f.default
    if isinstance(d, list):
        return "[]"
    if d is ZERO_UUID:
        return "_ZERO"
    if isinstance(d, type):
        name = f"_cls{next(_ids)}"
        _NS[name] = d
        return f"{name}()"
    return repr(d)


def _const(value: Any) -> str:
    name = f"_k{next(_ids)}"
    _NS[name] = value
    return name


class _Gen:
    """Builds the source of one function; `tmp()` hands out unique local names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._n = 0

    def tmp(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def emit(self, ind: int, *lines: str) -> None:
        self.lines.extend("    " * ind + ln for ln in lines)


# ----------------------------------------------------------------- decoders


def _dec_length(g: _Gen, ind: int, var: str, flex: bool, wide: bool) -> None:
    """Read a length/count into var; null is -1 in both encodings."""
    if flex:
        g.emit(
            ind,
            f"{var} = buf[pos]",
            f"if {var} < 128:",
            "    pos += 1",
            "else:",
            f"    {var}, pos = _uv(buf, pos)",
            f"{var} -= 1",
        )
    elif wide:
        g.emit(ind, f"{var}, = _I32.unpack_from(buf, pos)", "pos += 4")
    else:
        g.emit(ind, f"{var}, = _I16.unpack_from(buf, pos)", "pos += 2")


def _dec_null(g: _Gen, ind: int, var: str, target: str, nullable: bool, what: str) -> None:
    g.emit(ind, f"if {var} < 0:")
    if nullable:
        g.emit(
            ind + 1,
            f"if {var} != -1:",
            f"    raise _Bad('negative length for {what}')",
            f"{target} = None",
        )
    else:
        g.emit(ind + 1, f"raise _Bad('null or negative length for non-nullable {what}')")
    g.emit(ind, "else:")


def _dec_value(
    g: _Gen, ind: int, t: Any, target: str, nullable: bool, version: int, flex: bool, what: str
) -> None:
    if isinstance(t, Primitive) and t.fmt:
        k = _const(struct.Struct(">" + t.fmt))
        g.emit(ind, f"{target}, = {k}.unpack_from(buf, pos)", f"pos += {t.size}")
        if t is UUID:
            g.emit(ind, f"{target} = _uuid({target})")
    elif isinstance(t, Primitive):
        n, e = g.tmp("n"), g.tmp("e")
        _dec_length(g, ind, n, flex, wide=t is not STRING)
        _dec_null(g, ind, n, target, nullable, what)
        g.emit(ind + 1, f"{e} = pos + {n}", f"if {e} > end:", f"    raise _Bad('truncated {what}')")
        if t is STRING:
            if flex:
                # Kafka's limit for every string (a non-flexible length is an int16 anyway).
                g.emit(
                    ind + 1,
                    f"if {n} > {MAX_STRING_BYTES}:",
                    f"    raise _Bad('{what}: a string longer than {MAX_STRING_BYTES} bytes')",
                )
            g.emit(ind + 1, f"{target} = str(buf[pos:{e}], 'utf-8')")
        elif t is BYTES:
            g.emit(ind + 1, f"{target} = bytes(buf[pos:{e}])")
        else:  # RECORDS: zero-copy view into the frame
            g.emit(ind + 1, f"{target} = buf[pos:{e}]")
        g.emit(ind + 1, f"pos = {e}")
    elif isinstance(t, Array):
        el = t.element
        n = g.tmp("n")
        _dec_length(g, ind, n, flex, wide=True)
        _dec_null(g, ind, n, target, nullable, what)
        ms = _min_size(el, version, flex)
        g.emit(
            ind + 1, f"if {n} * {ms} > end - pos:", f"    raise _Bad('{what}: count exceeds input')"
        )
        if isinstance(el, Primitive) and el.fmt and el is not UUID:
            g.emit(
                ind + 1,
                f"{target} = list(_unpack_from('>%d{el.fmt}' % {n}, buf, pos))",
                f"pos += {n} * {el.size}",
            )
        else:
            ap = g.tmp("ap")
            item = g.tmp("x")
            g.emit(ind + 1, f"{target} = []", f"{ap} = {target}.append", f"for _ in range({n}):")
            if _is_struct(el):
                g.emit(ind + 2, f"{item}, pos = {_decoder_name(el, version, flex)}(buf, pos, end)")
            else:
                _dec_value(g, ind + 2, el, item, False, version, flex, what + "[]")
            g.emit(ind + 2, f"{ap}({item})")
    elif nullable:  # a nullable struct: an int8 marker first (-1 null, 1 present)
        g.emit(
            ind,
            "if pos >= end:",
            f"    raise _Bad('truncated {what}')",
            "if buf[pos] == 0xFF:",
            f"    {target} = None",
            "    pos += 1",
            "else:",
            f"    {target}, pos = {_decoder_name(t, version, flex)}(buf, pos + 1, end)",
        )
    else:  # nested struct
        g.emit(ind, f"{target}, pos = {_decoder_name(t, version, flex)}(buf, pos, end)")


def _skip_tags(g: _Gen, ind: int) -> None:
    g.emit(
        ind,
        "nt, pos = _uv(buf, pos)",
        "if nt > end - pos:",
        "    raise _Bad('tag count exceeds input')",
        "for _ in range(nt):",
        "    tag, pos = _uv(buf, pos)",
        "    sz, pos = _uv(buf, pos)",
        "    pos += sz",
        "    if pos > end:",
        "        raise _Bad('truncated tagged field')",
    )


def _decoder_name(cls: type[Message], version: int, flex: bool) -> str:
    key = (cls, version, flex)
    name = _DEC.get(key)
    if name is not None:
        return name
    with _BUILDING:
        name = _DEC.get(key) or _BUILDING_NAMES.get(key)
        if name is None:
            name = f"d_{cls.__name__}_{version}_{int(flex)}_{next(_ids)}"
            _BUILDING_NAMES[key] = name
            try:
                _build_decoder(cls, version, flex, name)
            finally:
                del _BUILDING_NAMES[key]
            _DEC[key] = name
        return name


def _build_decoder(cls: type[Message], version: int, flex: bool, name: str) -> None:
    g = _Gen()
    g.emit(0, f"def {name}(buf, pos, end):")
    fields = cls._schema.fields
    run: list[tuple[int, Field]] = []

    def flush() -> None:
        if not run:
            return
        fmt = ">" + "".join(f.type.fmt for _, f in run)
        k = _const(struct.Struct(fmt))
        g.emit(
            1,
            f"{', '.join(f'v{i}' for i, _ in run)}, = {k}.unpack_from(buf, pos)",
            f"pos += {struct.calcsize(fmt)}",
        )
        for i, f in run:
            if f.type is UUID:
                g.emit(1, f"v{i} = _uuid(v{i})")
        run.clear()

    tagged: list[tuple[int, Field]] = []
    for i, f in enumerate(fields):
        if not f.present(version) or (f.tag is not None and not flex):
            flush()
            g.emit(1, f"v{i} = {_default_expr(f)}")
        elif f.tag is not None:
            g.emit(1, f"v{i} = {_default_expr(f)}")
            tagged.append((i, f))
        elif isinstance(f.type, Primitive) and f.type.fmt:
            run.append((i, f))
        else:
            flush()
            _dec_value(
                g,
                1,
                f.type,
                f"v{i}",
                f.nullable_at(version),
                version,
                flex,
                f"{cls.__name__}.{f.name}",
            )
    flush()
    if flex:
        if not tagged:
            g.emit(1, "if buf[pos] == 0:", "    pos += 1", "else:")
            _skip_tags(g, 2)
        else:
            g.emit(
                1,
                "nt, pos = _uv(buf, pos)",
                "if nt > end - pos:",
                "    raise _Bad('tag count exceeds input')",
                "for _ in range(nt):",
                "    tag, pos = _uv(buf, pos)",
                "    sz, pos = _uv(buf, pos)",
                "    te = pos + sz",
                "    if te > end:",
                "        raise _Bad('truncated tagged field')",
            )
            for j, (i, f) in enumerate(tagged):
                g.emit(2, f"{'if' if j == 0 else 'elif'} tag == {f.tag}:")
                _dec_value(
                    g,
                    3,
                    f.type,
                    f"v{i}",
                    f.nullable_at(version),
                    version,
                    flex,
                    f"{cls.__name__}.{f.name}",
                )
                g.emit(
                    3,
                    "if pos != te:",
                    f"    raise _Bad('tagged field {f.name} has the wrong size')",
                )
            g.emit(2, "pos = te")
    k = _const(cls)
    g.emit(1, f"return {k}({', '.join(f'v{i}' for i in range(len(fields)))}), pos")
    exec("\n".join(g.lines), _NS)


# ----------------------------------------------------------------- encoders


def _enc_length(flex: bool, wide: bool, expr: str) -> str:
    if flex:
        return f"_uvb({expr} + 1)"
    return f"{'_I32' if wide else '_I16'}.pack({expr})"


def _enc_null(
    g: _Gen, ind: int, x: str, ap: str, flex: bool, wide: bool, nullable: bool, what: str
) -> None:
    g.emit(ind, f"if {x} is None:")
    if nullable:
        null = b"\x00" if flex else (b"\xff\xff\xff\xff" if wide else b"\xff\xff")
        g.emit(ind + 1, f"{ap}({null!r})")
    else:
        g.emit(ind + 1, f"raise _EncErr('{what} is not nullable at this version')")
    g.emit(ind, "else:")


def _enc_value(
    g: _Gen,
    ind: int,
    t: Any,
    x: str,
    ap: str,
    out: str,
    nullable: bool,
    version: int,
    flex: bool,
    seg: bool,
    what: str,
) -> None:
    if isinstance(t, Primitive) and t.fmt:
        k = _const(struct.Struct(">" + t.fmt))
        g.emit(ind, f"{ap}({k}.pack({x}.bytes))" if t is UUID else f"{ap}({k}.pack({x}))")
    elif isinstance(t, Primitive):
        wide = t is not STRING
        _enc_null(g, ind, x, ap, flex, wide, nullable, what)
        if t is STRING:
            b = g.tmp("b")
            g.emit(
                ind + 1,
                f"{b} = {x}.encode('utf-8')",
                f"{ap}({_enc_length(flex, False, f'len({b})')})",
                f"{ap}({b})",
            )
        elif t is RECORDS and seg:
            g.emit(
                ind + 1,
                f"{ap}({_enc_length(flex, True, f'len({x})')})",
                f"if len({x}):",
                f"    {ap}(({x},))",
            )
        else:
            g.emit(ind + 1, f"{ap}({_enc_length(flex, True, f'len({x})')})", f"{ap}({x})")
    elif isinstance(t, Array):
        el = t.element
        _enc_null(g, ind, x, ap, flex, True, nullable, what)
        g.emit(ind + 1, f"{ap}({_enc_length(flex, True, f'len({x})')})")
        if isinstance(el, Primitive) and el.fmt and el is not UUID:
            g.emit(ind + 1, f"{ap}(_pack('>%d{el.fmt}' % len({x}), *{x}))")
        else:
            item = g.tmp("x")
            g.emit(ind + 1, f"for {item} in {x}:")
            if _is_struct(el):
                g.emit(ind + 2, f"{_encoder_name(el, version, flex, seg)}({item}, {out})")
            else:
                _enc_value(g, ind + 2, el, item, ap, out, False, version, flex, seg, what + "[]")
    elif nullable:  # a nullable struct: an int8 marker first (-1 null, 1 present)
        g.emit(
            ind,
            f"if {x} is None:",
            f"    {ap}(b'\\xff')",
            "else:",
            f"    {ap}(b'\\x01')",
            f"    {_encoder_name(t, version, flex, seg)}({x}, {out})",
        )
    else:
        g.emit(
            ind,
            f"if {x} is None:",
            f"    raise _EncErr('{what} is not nullable')",
            f"{_encoder_name(t, version, flex, seg)}({x}, {out})",
        )


def _non_default(f: Field, x: str) -> str:
    d = f.default
    if d is None:
        return f"{x} is not None"
    if isinstance(d, list):
        return f"{x}"
    if d is ZERO_UUID:
        return f"{x} != _ZERO"
    return f"{x} != {d!r}"


def _encoder_name(cls: type[Message], version: int, flex: bool, seg: bool) -> str:
    seg = seg and _has_records(cls, version)
    key = (cls, version, flex, seg)
    name = _ENC.get(key)
    if name is not None:
        return name
    with _BUILDING:
        name = _ENC.get(key) or _BUILDING_NAMES.get(key)
        if name is None:
            name = f"e_{cls.__name__}_{version}_{int(flex)}{'s' if seg else ''}_{next(_ids)}"
            _BUILDING_NAMES[key] = name
            try:
                _build_encoder(cls, version, flex, seg, name)
            finally:
                del _BUILDING_NAMES[key]
            _ENC[key] = name
        return name


def _build_encoder(cls: type[Message], version: int, flex: bool, seg: bool, name: str) -> None:
    g = _Gen()
    g.emit(0, f"def {name}(o, out):", "    ap = out.append")
    run: list[Field] = []

    def flush() -> None:
        if not run:
            return
        k = _const(struct.Struct(">" + "".join(f.type.fmt for f in run)))
        args = ", ".join(f"o.{f.name}.bytes" if f.type is UUID else f"o.{f.name}" for f in run)
        g.emit(1, f"ap({k}.pack({args}))")
        run.clear()

    tagged = []
    for f in cls._schema.fields:
        if not f.present(version) or (f.tag is not None and not flex):
            continue
        if f.tag is not None:
            tagged.append(f)
        elif isinstance(f.type, Primitive) and f.type.fmt:
            run.append(f)
        else:
            flush()
            x = g.tmp("f")
            g.emit(1, f"{x} = o.{f.name}")
            _enc_value(
                g,
                1,
                f.type,
                x,
                "ap",
                "out",
                f.nullable_at(version),
                version,
                flex,
                seg,
                f"{cls.__name__}.{f.name}",
            )
    flush()
    if flex:
        if not tagged:
            g.emit(1, "ap(b'\\x00')")
        else:
            g.emit(1, "tg = []")
            for f in sorted(tagged, key=lambda f: f.tag or 0):
                x = g.tmp("f")
                g.emit(
                    1,
                    f"{x} = o.{f.name}",
                    f"if {_non_default(f, x)}:",
                    "    sub = []",
                    "    sap = sub.append",
                )
                _enc_value(
                    g,
                    2,
                    f.type,
                    x,
                    "sap",
                    "sub",
                    f.nullable_at(version),
                    version,
                    flex,
                    False,
                    f"{cls.__name__}.{f.name}",
                )
                g.emit(
                    2,
                    "tb = b''.join(sub)",
                    f"tg.append({uvarint(f.tag or 0)!r} + _uvb(len(tb)) + tb)",
                )
            g.emit(1, "ap(_uvb(len(tg)))", "out.extend(tg)")
    exec("\n".join(g.lines), _NS)


# ----------------------------------------------------------------- public face


def _coalesce(parts: list[Any]) -> list[Segment]:
    """Join runs of framing bytes; records items (wrapped in 1-tuples) stay separate."""
    segs: list[Segment] = []
    run: list[bytes] = []
    for p in parts:
        if type(p) is tuple:
            if run:
                segs.append(b"".join(run))
                run = []
            segs.append(p[0])
        else:
            run.append(p)
    if run:
        segs.append(b"".join(run))
    return segs


class Codec:
    """Compiled encoder/decoder for one message class at one version."""

    __slots__ = ("_dec", "_enc", "_enc_seg", "flexible", "message", "version")

    def __init__(self, message: type[Message], version: int, flexible: bool) -> None:
        self.message = message
        self.version = version
        self.flexible = flexible
        self._dec: Callable[..., tuple[Message, int]] = _NS[
            _decoder_name(message, version, flexible)
        ]
        self._enc: Callable[[Any, list[Any]], None] = _NS[
            _encoder_name(message, version, flexible, False)
        ]
        self._enc_seg: Callable[[Any, list[Any]], None] = _NS[
            _encoder_name(message, version, flexible, True)
        ]

    def decode(self, data: bytes | bytearray | memoryview) -> Message:
        """Decode exactly `data` (trailing bytes are an error)."""
        buf = memoryview(data)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        obj, pos = self.decode_from(buf, 0)
        if pos != len(buf):
            raise ProtocolDecodeError(
                f"{len(buf) - pos} trailing bytes after {self.message.__name__}"
            )
        return obj

    def decode_from(self, buf: memoryview, pos: int) -> tuple[Message, int]:
        """Decode one message starting at pos; returns it and the position after it."""
        try:
            return self._dec(buf, pos, len(buf))
        except ProtocolDecodeError:
            raise
        except _DECODE_ERRORS as e:
            raise ProtocolDecodeError(
                f"malformed {self.message.__name__} v{self.version}: {e}"
            ) from e

    def encode_into(self, msg: Any, out: list[Any]) -> None:
        """Append the encoding of msg to a list of bytes chunks."""
        try:
            self._enc(msg, out)
        except ProtocolEncodeError:
            raise
        except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as e:
            raise ProtocolEncodeError(
                f"cannot encode {self.message.__name__} v{self.version}: {e}"
            ) from e

    def encode(self, msg: Any) -> bytes:
        out: list[Any] = []
        self.encode_into(msg, out)
        try:
            return b"".join(out)
        except TypeError as e:
            raise ProtocolEncodeError(
                f"{self.message.__name__}: a records field holds a placeholder; "
                "use encode_segments()"
            ) from e

    def encode_segments(self, msg: Any, prefix: bytes = b"") -> list[Segment]:
        """Encode with records values left out as separate segments (see module doc)."""
        out: list[Any] = [prefix] if prefix else []
        try:
            self._enc_seg(msg, out)
        except ProtocolEncodeError:
            raise
        except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as e:
            raise ProtocolEncodeError(
                f"cannot encode {self.message.__name__} v{self.version}: {e}"
            ) from e
        return _coalesce(out)


def segments_size(segments: list[Segment]) -> int:
    """Total bytes the segments put on the wire."""
    return sum(len(s) if not isinstance(s, memoryview) else s.nbytes for s in segments)
