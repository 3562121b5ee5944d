"""Per-process TLS credentials for the embedded cluster: one self-signed certificate in memory.

``distributed.Security.temporary()`` makes such a certificate with the ``cryptography``
package, and is used whenever that package is importable. Without it, ``self_signed()`` builds
the same kind of credentials from the standard library alone: an ECDSA P-256 key drawn from
``secrets`` (the operating system's random source) and a certificate signed with it, written in
DER by hand. Only key generation and that one signature run in Python, before any connection
exists; every TLS handshake is OpenSSL's (through ``ssl``), which also parses and checks both
PEM texts before they are used.

The certificate is its own authority: scheduler, workers, nannies and client all present it and
trust only it (``distributed`` asks for certificates both ways), so a process that does not hold
the key cannot complete a handshake with any of them.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import secrets
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import distributed

__all__ = ["COMMON_NAME", "security", "self_signed"]

COMMON_NAME: Final = "dask-internal"  # the name Security.temporary() gives its certificate

# NIST P-256 (secp256r1): y^2 = x^3 - 3x + b over GF(p), base point G of prime order n.
_P: Final = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
_B: Final = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
_N: Final = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_G: Final = (
    0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
    0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
)

_EC_PUBLIC_KEY: Final = "1.2.840.10045.2.1"
_PRIME256V1: Final = "1.2.840.10045.3.1.7"
_ECDSA_SHA256: Final = "1.2.840.10045.4.3.2"
_COMMON_NAME_OID: Final = "2.5.4.3"
_SUBJECT_ALT_NAME: Final = "2.5.29.17"

_Point = tuple[int, int] | None  # None: the point at infinity


def _add(a: _Point, b: _Point) -> _Point:
    if a is None:
        return b
    if b is None:
        return a
    (x1, y1), (x2, y2) = a, b
    if x1 == x2 and (y1 + y2) % _P == 0:
        return None
    if a == b:
        slope = (3 * x1 * x1 - 3) * pow(2 * y1, -1, _P) % _P
    else:
        slope = (y2 - y1) * pow(x2 - x1, -1, _P) % _P
    x3 = (slope * slope - x1 - x2) % _P
    return x3, (slope * (x1 - x3) - y1) % _P


def _times(k: int, point: _Point) -> _Point:
    result: _Point = None
    while k:
        if k & 1:
            result = _add(result, point)
        point = _add(point, point)
        k >>= 1
    return result


# DER: tag, length, contents (X.690).
def _tlv(tag: int, body: bytes) -> bytes:
    size = len(body)
    if size < 0x80:
        return bytes([tag, size]) + body
    octets = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(octets)]) + octets + body


def _seq(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))


def _int(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))  # a leading 0 bit


def _oid(dotted: str) -> bytes:
    first, second, *rest = (int(part) for part in dotted.split("."))
    body = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body += bytes(reversed(chunk))
    return _tlv(0x06, bytes(body))


def _bits(body: bytes) -> bytes:
    return _tlv(0x03, b"\x00" + body)  # no unused bits


def _time(moment: datetime.datetime) -> bytes:
    if moment.year < 2050:  # RFC 5280: UTCTime through 2049, GeneralizedTime after
        return _tlv(0x17, moment.strftime("%y%m%d%H%M%SZ").encode())
    return _tlv(0x18, moment.strftime("%Y%m%d%H%M%SZ").encode())


def _name(common: str) -> bytes:
    return _seq(_tlv(0x31, _seq(_oid(_COMMON_NAME_OID), _tlv(0x0C, common.encode()))))


def _pem(label: str, der: bytes) -> str:
    text = base64.encodebytes(der).decode().replace("\n", "")
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""])


def _sign(message: bytes, key: int) -> bytes:
    digest = int.from_bytes(hashlib.sha256(message).digest(), "big")  # 256 bits: no truncation
    while True:
        nonce = secrets.randbelow(_N - 1) + 1
        point = _times(nonce, _G)
        assert point is not None
        r = point[0] % _N
        s = pow(nonce, -1, _N) * (digest + r * key) % _N
        if r and s:
            return _seq(_int(r), _int(s))


def self_signed(days: int = 3650) -> tuple[str, str]:
    """(certificate, private key), both PEM: a fresh P-256 key and a certificate it signed."""
    key = secrets.randbelow(_N - 1) + 1
    public = _times(key, _G)
    assert public is not None
    point = b"\x04" + public[0].to_bytes(32, "big") + public[1].to_bytes(32, "big")
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    algorithm = _seq(_oid(_ECDSA_SHA256))
    names = _seq(_tlv(0x82, COMMON_NAME.encode()))  # dNSName [2]
    tbs = _seq(
        _tlv(0xA0, _int(2)),  # version 3
        _int(secrets.randbits(120) | 1 << 120),  # positive, at most 20 octets
        algorithm,
        _name(COMMON_NAME),
        _seq(_time(now - datetime.timedelta(minutes=5)), _time(now + datetime.timedelta(days))),
        _name(COMMON_NAME),
        _seq(_seq(_oid(_EC_PUBLIC_KEY), _oid(_PRIME256V1)), _bits(point)),
        _tlv(0xA3, _seq(_seq(_oid(_SUBJECT_ALT_NAME), _tlv(0x04, names)))),
    )
    certificate = _seq(tbs, algorithm, _bits(_sign(tbs, key)))
    private = _seq(
        _int(1),
        _tlv(0x04, key.to_bytes(32, "big")),
        _tlv(0xA0, _oid(_PRIME256V1)),
        _tlv(0xA1, _bits(point)),
    )
    return _pem("CERTIFICATE", certificate), _pem("EC PRIVATE KEY", private)


def security() -> distributed.Security:
    """A ``distributed.Security`` for every role, from credentials made for this call only."""
    import importlib.util

    import distributed

    if importlib.util.find_spec("cryptography") is not None:
        return distributed.Security.temporary()
    certificate, key = self_signed()
    roles = ("client", "scheduler", "worker")
    found = distributed.Security(
        require_encryption=True,
        tls_ca_file=certificate,
        **{f"tls_{role}_cert": certificate for role in roles},
        **{f"tls_{role}_key": key for role in roles},
    )
    # OpenSSL parses and checks both texts (the key must match the certificate) here, once,
    # so a fault in them is an error at start-up rather than a failed handshake later.
    found.get_connection_args("client")
    return found
