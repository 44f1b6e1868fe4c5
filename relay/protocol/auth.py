"""Authentication plugin arithmetic (docs/protocol.md 2.3 to 2.5): scrambles in, tokens out."""

from __future__ import annotations

import base64
import hashlib
import os
import re

from . import ed25519

NATIVE_PASSWORD = "mysql_native_password"
CACHING_SHA2_PASSWORD = "caching_sha2_password"
CLIENT_ED25519 = "client_ed25519"  # the client side of MariaDB's ed25519 plugin: its name on the wire
ED25519_NONCE_BYTES = 32
_ED25519_HASH = re.compile(r"[A-Za-z0-9+/]{43}=?")


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right))


def native_password_token(password: bytes, scramble: bytes) -> bytes:
    """SHA1(pw) XOR SHA1(scramble || SHA1(SHA1(pw))); empty password gives an empty token."""
    if not password:
        return b""
    stage1 = hashlib.sha1(password).digest()
    stage2 = hashlib.sha1(stage1).digest()
    return _xor(stage1, hashlib.sha1(scramble[:20] + stage2).digest())


def native_password_check(token: bytes, scramble: bytes, stored_hash: bytes) -> bool:
    """Server side: ``stored_hash`` is SHA1(SHA1(pw)) (b"" for an account without password)."""
    if not stored_hash:
        return token == b""
    if len(token) != 20:
        return False
    stage1 = _xor(token, hashlib.sha1(scramble[:20] + stored_hash).digest())
    return hashlib.sha1(stage1).digest() == stored_hash


def caching_sha2_token(password: bytes, scramble: bytes) -> bytes:
    """SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) || scramble)."""
    if not password:
        return b""
    stage1 = hashlib.sha256(password).digest()
    stage2 = hashlib.sha256(stage1).digest()
    return _xor(stage1, hashlib.sha256(stage2 + scramble[:20]).digest())


def caching_sha2_check(token: bytes, scramble: bytes, stored_sha2_hash: bytes) -> bool:
    """Server side: ``stored_sha2_hash`` is SHA256(SHA256(pw))."""
    if not stored_sha2_hash:
        return token == b""
    if len(token) != 32:
        return False
    stage1 = _xor(token, hashlib.sha256(stored_sha2_hash + scramble[:20]).digest())
    return hashlib.sha256(stage1).digest() == stored_sha2_hash


def rsa_encrypt_password(password: bytes, scramble: bytes, public_key_pem: bytes) -> bytes:
    """caching_sha2_password full authentication without TLS: RSA-OAEP(SHA-1) of the
    NUL-terminated password XORed with the scramble repeated."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    plain = password + b"\x00"
    mask = (scramble[:20] * (len(plain) // 20 + 1))[: len(plain)]
    key = serialization.load_pem_public_key(public_key_pem)
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    return key.encrypt(_xor(plain, mask), oaep)  # type: ignore[union-attr]


def rsa_decrypt_password(ciphertext: bytes, scramble: bytes, private_key_pem: bytes) -> bytes | None:
    """Server side of ``rsa_encrypt_password``: the password, or None if it does not decrypt."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    key = serialization.load_pem_private_key(private_key_pem, password=None)
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    try:
        plain = key.decrypt(ciphertext, oaep)  # type: ignore[union-attr]
    except ValueError:
        return None
    mask = (scramble[:20] * (len(plain) // 20 + 1))[: len(plain)]
    return _xor(plain, mask).rstrip(b"\x00")


def ed25519_token(password: bytes, nonce: bytes) -> bytes:
    """client_ed25519: the 64-byte signature of the server's 32-byte nonce with the password's key."""
    return ed25519.sign(password, nonce)


def ed25519_check(token: bytes, nonce: bytes, public_key: bytes) -> bool:
    """Server side: ``public_key`` is what ``ed25519_password_hash`` encodes."""
    return ed25519.verify(public_key, nonce, token)


def new_ed25519_nonce() -> bytes:
    """32 random bytes, any values (the plugin's data is length-delimited, as MariaDB sends it)."""
    return os.urandom(ED25519_NONCE_BYTES)


def ed25519_password_hash(password: str) -> str:
    """What MariaDB keeps for ``IDENTIFIED VIA ed25519 USING PASSWORD(...)``: the base64 of the
    password's public key without its padding ``=``, 43 characters."""
    return base64.b64encode(ed25519.public_key(password.encode("utf-8"))).decode("ascii").rstrip("=")


def ed25519_key_of(password_hash: str) -> bytes | None:
    """The public key an ed25519 hash stands for; None unless it is 43 base64 characters (a
    trailing ``=`` allowed) that name a point of the curve."""
    if not _ED25519_HASH.fullmatch(password_hash):
        return None
    key = base64.b64decode(password_hash[:43] + "=")
    return key if ed25519.is_public_key(key) else None


def native_hash_of(password: bytes) -> bytes:
    """SHA1(SHA1(password)): what mysql_native_password keeps (b"" for no password)."""
    return hashlib.sha1(hashlib.sha1(password).digest()).digest() if password else b""


def native_password_hash(password: str) -> str:
    """MySQL's PASSWORD(): ``"*"`` + upper-case hex SHA1(SHA1(password)); ``""`` for no password."""
    return "*" + native_hash_of(password.encode("utf-8")).hex().upper() if password else ""


def sha2_hash_of(password: bytes) -> bytes:
    """SHA256(SHA256(password)): what caching_sha2_password keeps (b"" for no password)."""
    return hashlib.sha256(hashlib.sha256(password).digest()).digest() if password else b""


def new_rsa_key_pair() -> tuple[bytes, bytes]:
    """(private PEM, public PEM) for caching_sha2_password full authentication without TLS."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public
