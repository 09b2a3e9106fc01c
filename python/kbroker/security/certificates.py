"""The names an X.509 certificate is for: its subject and its subject alternative names.

A listener whose keystore changes while the broker runs must keep presenting
a certificate for the same names, as Kafka requires unless
``ssl.allow.dn.changes`` / ``ssl.allow.san.changes`` say otherwise: the same
distinguished name (compared as X.500 names are, attribute by attribute,
case and surrounding spaces aside) and every alternative name of the old
certificate among the new one's.

The names are read from the certificate's DER bytes (the first certificate of
a PEM chain: the keystore's own) by a small reader of the few DER structures
on the way (TBSCertificate, Name, the subjectAltName extension). It checks
every length against what holds it: a certificate it cannot read gives None,
never an exception.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----"
)
_SEQUENCE, _SET, _OID, _OCTET_STRING, _BOOLEAN = 0x30, 0x31, 0x06, 0x04, 0x01
_EXPLICIT_0, _EXPLICIT_3 = 0xA0, 0xA3
_SUBJECT_ALT_NAME = bytes([0x55, 0x1D, 0x11])  # 2.5.29.17
# Attribute types as RFC 4514 names them (others are shown dotted).
_ATTRIBUTE_NAMES = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.1": "UID",
    "0.9.2342.19200300.100.1.25": "DC",
}
_TEXT_ENCODINGS = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x16: "ascii",  # IA5String
    0x14: "latin-1",  # TeletexString, as it is used
    0x1E: "utf-16-be",  # BMPString
    0x1C: "utf-32-be",  # UniversalString
}

# (attribute type, value) pairs of one relative distinguished name, in a set's order.
Rdn = tuple[tuple[str, str], ...]


class _Malformed(ValueError):
    pass


def _element(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """The DER element at ``pos`` (which must end by ``end``): (tag, content start,
    content end)."""
    if pos + 2 > end:
        raise _Malformed("truncated")
    tag, length = data[pos], data[pos + 1]
    if tag & 0x1F == 0x1F:
        raise _Malformed("multi-byte tag")
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or pos + count > end:
            raise _Malformed("bad length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > end:
        raise _Malformed("length beyond its container")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements inside ``data[start:end]``: (tag, content start, content end, element
    start) each."""
    out = []
    pos = start
    while pos < end:
        tag, body, stop = _element(data, pos, end)
        out.append((tag, body, stop, pos))
        pos = stop
    return out


def _oid(raw: bytes) -> str:
    """An OBJECT IDENTIFIER's content as dotted text."""
    numbers = []
    value = 0
    for byte in raw:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            numbers.append(value)
            value = 0
    if not numbers or raw[-1] & 0x80:
        raise _Malformed("bad OID")
    # The first number holds the first two arcs: 40 * first + second (first at most 2).
    first = min(numbers[0] // 40, 2)
    return ".".join(map(str, [first, numbers[0] - 40 * first, *numbers[1:]]))


def _text(tag: int, raw: bytes) -> str:
    encoding = _TEXT_ENCODINGS.get(tag)
    if encoding is None:
        return "#" + raw.hex()
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        raise _Malformed("bad string") from None


def _name(data: bytes, start: int, end: int) -> tuple[Rdn, ...]:
    rdns = []
    for tag, body, stop, _ in _children(data, start, end):
        if tag != _SET:
            raise _Malformed("RDN is not a set")
        pairs = []
        for atv_tag, atv_body, atv_stop, _ in _children(data, body, stop):
            parts = _children(data, atv_body, atv_stop)
            if atv_tag != _SEQUENCE or len(parts) != 2 or parts[0][0] != _OID:
                raise _Malformed("bad attribute")
            (_, oid_start, oid_end, _), (value_tag, value_start, value_end, _) = parts
            pairs.append(
                (_oid(data[oid_start:oid_end]), _text(value_tag, data[value_start:value_end]))
            )
        rdns.append(tuple(pairs))
    return tuple(rdns)


def _alt_names(data: bytes, start: int, end: int) -> frozenset[bytes]:
    """The GeneralName elements of the extensions' subjectAltName, whole (empty without)."""
    for tag, body, stop, _ in _children(data, start, end):
        if tag != _SEQUENCE:
            raise _Malformed("bad extension")
        parts = _children(data, body, stop)
        if not parts or parts[0][0] != _OID:
            raise _Malformed("bad extension")
        if data[parts[0][1] : parts[0][2]] != _SUBJECT_ALT_NAME:
            continue
        value = parts[-1]
        if value[0] != _OCTET_STRING:
            raise _Malformed("bad extension value")
        inner = _children(data, value[1], value[2])
        if len(inner) != 1 or inner[0][0] != _SEQUENCE:
            raise _Malformed("bad subjectAltName")
        return frozenset(data[s:e] for _, _, e, s in _children(data, inner[0][1], inner[0][2]))
    return frozenset()


def _normalized(value: str) -> str:
    return " ".join(value.split()).casefold()


@dataclass(frozen=True)
class CertificateNames:
    subject: tuple[Rdn, ...]  # the RDNs in the certificate's order
    alt_names: frozenset[bytes]  # each GeneralName's DER bytes

    @classmethod
    def from_der(cls, der: bytes) -> CertificateNames | None:
        """The names of a DER certificate, or None when it cannot be read."""
        try:
            tag, body, stop = _element(der, 0, len(der))
            if tag != _SEQUENCE:
                return None
            tbs_tag, tbs_body, tbs_stop = _element(der, body, stop)
            fields = _children(der, tbs_body, tbs_stop)
            if tbs_tag != _SEQUENCE:
                return None
            if fields and fields[0][0] == _EXPLICIT_0:
                fields = fields[1:]  # the version
            # serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, ...
            if len(fields) < 6 or fields[4][0] != _SEQUENCE:
                return None
            subject = _name(der, fields[4][1], fields[4][2])
            alt_names: frozenset[bytes] = frozenset()
            for field_tag, field_body, field_stop, _ in fields[6:]:
                if field_tag == _EXPLICIT_3:
                    extensions = _children(der, field_body, field_stop)
                    if len(extensions) != 1 or extensions[0][0] != _SEQUENCE:
                        return None
                    alt_names = _alt_names(der, extensions[0][1], extensions[0][2])
            return cls(subject, alt_names)
        except _Malformed:
            return None

    @classmethod
    def from_pem(cls, text: str) -> CertificateNames | None:
        """The names of the first certificate of a PEM text (a keystore: its own)."""
        found = _PEM_CERTIFICATE.search(text)
        if found is None:
            return None
        try:
            der = ssl.PEM_cert_to_DER_cert(found.group(0))
        except ValueError:
            return None
        return cls.from_der(der)

    @property
    def distinguished_name(self) -> str:
        """The subject as RFC 4514 writes it (the last RDN first)."""
        return ",".join(
            "+".join(f"{_ATTRIBUTE_NAMES.get(oid, oid)}={value}" for oid, value in rdn)
            for rdn in reversed(self.subject)
        )

    def same_subject(self, other: CertificateNames) -> bool:
        """Whether both subjects are the same X.500 name (values compared without regard
        to case and runs of spaces; a multi-valued RDN's order does not count)."""

        def canonical(name: tuple[Rdn, ...]) -> tuple[frozenset[tuple[str, str]], ...]:
            return tuple(frozenset((oid, _normalized(v)) for oid, v in rdn) for rdn in name)

        return canonical(self.subject) == canonical(other.subject)
