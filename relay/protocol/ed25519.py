"""Ed25519 as MariaDB's ed25519 authentication plugin uses it (docs/protocol.md 2.5).

MariaDB derives the key pair from the password itself, not from a 32-byte seed as RFC 8032 does:
``az = SHA-512(password)`` of any length, the secret scalar is ``az[:32]`` clamped, and the
nonce prefix is ``az[32:]`` (plugin/auth_ed25519/ref10/keypair.c and sign.c).  No library
signs from such an expanded key (cryptography's Ed25519PrivateKey takes only the seed), so the
signing side is the curve arithmetic here, in Python integers: it runs once per login to the
primary and for ``hash-password``, a few milliseconds each.  It is not constant-time, which is
acceptable for a client signing a fresh server nonce over a connection it chose to open.

The signatures are plain Ed25519 over the public key, so the server side verifies them with
cryptography (``verify``): nothing here is on the path of an untrusted client.
"""

from __future__ import annotations

import hashlib

P = 2**255 - 19  # the field prime
L = 2**252 + 27742317777372353535851937790883648493  # the order of the base point
D = -121665 * pow(121666, -1, P) % P  # the curve constant of -x^2 + y^2 = 1 + d x^2 y^2
SQRT_MINUS_ONE = pow(2, (P - 1) // 4, P)

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64

# A point in extended coordinates (X, Y, Z, T) with x = X/Z, y = Y/Z, x*y = T/Z.
Point = tuple[int, int, int, int]
_IDENTITY: Point = (0, 1, 1, 0)


def _add(p: Point, q: Point) -> Point:
    """RFC 8032 5.1.4's addition (complete: it also doubles)."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * D * t1 * t2 % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % P, g * h % P, f * g % P, e * h % P


def _multiply(scalar: int, point: Point) -> Point:
    result = _IDENTITY
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _recover_x(y: int, odd: int) -> int | None:
    """The x of the curve point with this y whose parity is ``odd``; None if there is none."""
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, -1, P) % P
    if x2 == 0:
        return None if odd else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_MINUS_ONE % P
    if (x * x - x2) % P:
        return None
    return P - x if x & 1 != odd else x


def _encode(point: Point) -> bytes:
    x, y, z, _ = point
    inverse = pow(z, -1, P)
    x, y = x * inverse % P, y * inverse % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


_BASE_Y = 4 * pow(5, -1, P) % P
_BASE_X = _recover_x(_BASE_Y, 0)
assert _BASE_X is not None
BASE: Point = (_BASE_X, _BASE_Y, 1, _BASE_X * _BASE_Y % P)


def is_public_key(data: bytes) -> bool:
    """Whether ``data`` encodes a point of the curve, as every ed25519 password hash does."""
    if len(data) != PUBLIC_KEY_BYTES:
        return False
    encoded = int.from_bytes(data, "little")
    return _recover_x(encoded & ((1 << 255) - 1), encoded >> 255) is not None


def _secret(password: bytes) -> tuple[int, bytes]:
    """(the secret scalar, the nonce prefix) MariaDB derives from a password."""
    az = hashlib.sha512(password).digest()
    clamped = bytearray(az[:32])
    clamped[0] &= 248
    clamped[31] &= 63
    clamped[31] |= 64
    return int.from_bytes(clamped, "little"), az[32:]


def _hash_scalar(*parts: bytes) -> int:
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little") % L


def public_key(password: bytes) -> bytes:
    """The 32-byte public key of a password: what MariaDB stores, base64-encoded."""
    scalar, _ = _secret(password)
    return _encode(_multiply(scalar, BASE))


def sign(password: bytes, message: bytes) -> bytes:
    """The 64-byte signature R || S of ``message`` with the key pair of ``password``."""
    scalar, prefix = _secret(password)
    key = _encode(_multiply(scalar, BASE))
    nonce = _hash_scalar(prefix, message)
    r = _encode(_multiply(nonce, BASE))
    s = (nonce + _hash_scalar(r, key, message) * scalar) % L
    return r + s.to_bytes(32, "little")


def verify(key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is a valid Ed25519 signature of ``message`` under ``key``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if len(signature) != SIGNATURE_BYTES or len(key) != PUBLIC_KEY_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
