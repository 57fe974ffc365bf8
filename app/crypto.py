"""Encryption of stored data-source credentials.

AES-256-GCM with a key derived from settings.secret by HKDF (so the credential key differs from the
session/cookie keys derived from the same secret). The source id is bound as associated data, so a
ciphertext copied onto another row does not decrypt.
"""

from __future__ import annotations

import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_VERSION = b"\x01"
_INFO = b"tally data-source credentials v1"


class CredentialBox:
    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("a secret is required to encrypt credentials")
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret.encode())
        self._aead = AESGCM(key)

    def seal(self, plaintext: bytes, context: str) -> bytes:
        nonce = os.urandom(12)
        return _VERSION + nonce + self._aead.encrypt(nonce, plaintext, context.encode())

    def open(self, sealed: bytes, context: str) -> bytes:
        if sealed[:1] != _VERSION:
            raise ValueError("unknown credential encryption version")
        return self._aead.decrypt(sealed[1:13], sealed[13:], context.encode())
