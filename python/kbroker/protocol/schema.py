"""The declarative schema form: primitive types, fields, arrays and message structs.

A message is declared once with `message(name, *fields)`; the call returns a
generated class (slots, keyword constructor with defaults, equality, repr)
whose `_schema` holds the declaration. Version rules live on each field, so
the codec compiler (codec.py) can derive a flat encoder/decoder per version.

Version ranges are strings: "3+" (3 and later), "0-7", "5" (only 5),
"none". A field's `versions` says when it is on the wire; `nullable` says in
which of those versions it may be null; `tag=N` makes it a tagged field
(only in flexible versions, sent only when it differs from its default).

Messages are plain objects: decoders build them, encoders read the same
attributes, so a handler may encode any object that has every attribute the
version needs (normally an instance of the generated class).

`RequestHeader`, the decoded request header, lives here too, at the bottom of
the package, so errors can carry one (headers.py decodes and encodes it).
"""

from __future__ import annotations

import struct
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

MAX_VERSION = 0x7FFF
ZERO_UUID = uuid.UUID(int=0)


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """'3+' -> (3, MAX_VERSION); '0-7' -> (0, 7); '5' -> (5, 5); 'none'/None -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def in_range(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


@dataclass(frozen=True)
class Primitive:
    """A wire type. `fmt` is its struct format char when it has a fixed width."""

    name: str
    fmt: str | None
    default: Any

    @property
    def size(self) -> int:
        return struct.calcsize(">" + self.fmt) if self.fmt else 0


INT8 = Primitive("int8", "b", 0)
INT16 = Primitive("int16", "h", 0)
UINT16 = Primitive("uint16", "H", 0)
INT32 = Primitive("int32", "i", 0)
UINT32 = Primitive("uint32", "I", 0)
INT64 = Primitive("int64", "q", 0)
FLOAT64 = Primitive("float64", "d", 0.0)
BOOL = Primitive("bool", "?", False)
UUID = Primitive("uuid", "16s", ZERO_UUID)  # uuid.UUID in Python
STRING = Primitive("string", None, "")  # str
BYTES = Primitive("bytes", None, b"")  # bytes
# Record batches: decoded as a memoryview slice of the request frame (no
# copy); encoded from any bytes-like object or, in encode_segments(), a
# RecordsPlaceholder for bytes the server sends itself.
RECORDS = Primitive("records", None, None)


@dataclass(frozen=True)
class Array:
    """An array of a primitive or of a message class."""

    element: Any  # Primitive | type[Message]


_NO_DEFAULT: Any = object()


@dataclass
class Field:
    """One field of a message. See the module docstring for the version rules."""

    name: str
    type: Any  # Primitive | Array | type[Message]
    versions: str = "0+"
    nullable: str | None = None
    tag: int | None = None
    default: Any = _NO_DEFAULT
    # derived
    version_range: tuple[int, int] | None = field(init=False)
    nullable_range: tuple[int, int] | None = field(init=False)

    def __post_init__(self) -> None:
        self.version_range = parse_versions(self.versions)
        self.nullable_range = parse_versions(self.nullable)
        if self.default is _NO_DEFAULT:
            t = self.type
            if isinstance(t, Primitive):
                self.default = t.default
            elif isinstance(t, Array):
                self.default = []
            else:
                self.default = None if self.tag is not None else t
        if self.tag is not None and isinstance(self.type, type) and self.default is not None:
            raise ValueError(f"{self.name}: tagged struct fields default to None")

    def present(self, version: int) -> bool:
        return in_range(self.version_range, version)

    def nullable_at(self, version: int) -> bool:
        return in_range(self.nullable_range, version)


@dataclass
class StructSchema:
    name: str
    fields: list[Field]


class Message:
    """Base of every generated message class."""

    __slots__ = ()
    _schema: ClassVar[StructSchema]

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields; declared so type
        # checkers accept attribute access on decoded messages.
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    @classmethod
    def _fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in cls._schema.fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields())
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Nested plain-data view (lists of dicts), for logs and tests."""
        return {n: _plain(getattr(self, n)) for n in self._fields()}


def _plain(v: Any) -> Any:
    if isinstance(v, Message):
        return v.to_dict()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def message(name: str, *fields: Field) -> Any:
    """Declare a message and return its generated class.

    Nested message classes used by the fields become attributes of the new
    class under their own names (e.g. ``MetadataResponse.Topic``). The return
    type is Any because attributes are generated; instances are `Message`.
    """
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"{name}: duplicate field names")
    tags = [f.tag for f in fields if f.tag is not None]
    if len(set(tags)) != len(tags):
        raise ValueError(f"{name}: duplicate tags")
    ns: dict[str, Any] = {
        "__slots__": tuple(names),
        "__module__": sys._getframe(1).f_globals["__name__"],
    }
    for f in fields:
        t = f.type.element if isinstance(f.type, Array) else f.type
        if isinstance(t, type) and issubclass(t, Message):
            ns[t.__name__] = t
    cls: type[Message] = type(name, (Message,), ns)
    cls._schema = StructSchema(name, list(fields))
    cls.__init__ = _make_init(cls, list(fields))  # type: ignore[method-assign]
    return cls


def _make_init(cls: type, fields: list[Field]) -> Any:
    """Generate `__init__(self, f1=default, ...)`: positional in declaration order."""
    g: dict[str, Any] = {"_M": _NO_DEFAULT}
    params, body = [], []
    for i, f in enumerate(fields):
        d = f.default
        if isinstance(d, (int, float, str, bytes, bool, type(None))):
            params.append(f"{f.name}={d!r}")
            body.append(f"    self.{f.name} = {f.name}")
        else:  # mutable or object default: fresh value per instance
            g[f"_d{i}"] = d
            params.append(f"{f.name}=_M")
            if isinstance(d, list):
                make = "[]"
            elif isinstance(d, type):
                make = f"_d{i}()"
            else:
                make = f"_d{i}"
            body.append(f"    self.{f.name} = {make} if {f.name} is _M else {f.name}")
    src = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    if not params:
        src = "def __init__(self):\n    pass\n"
    exec(src, g)
    init = g["__init__"]
    init.__qualname__ = f"{cls.__name__}.__init__"
    return init


F = Field


class RequestHeader:
    """A decoded request header. `client_id` is None for header v0 or a null id."""

    __slots__ = ("api_key", "api_version", "client_id", "correlation_id", "header_version")

    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None = None,
        header_version: int = 1,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.header_version = header_version

    def __repr__(self) -> str:
        return (
            f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
            f"correlation_id={self.correlation_id}, client_id={self.client_id!r}, "
            f"header_version={self.header_version})"
        )
