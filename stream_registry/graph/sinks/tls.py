"""The key fingerprint `?fingerprint=` pins on `bolt+s://` and `bolt+ssc://` sinks.

The fingerprint is SHA-512 of the certificate's subjectPublicKey bits (OpenSSL's X509_pubkey_digest, what
libmgclient reports and what earlier mgstreams releases pinned with pymgclient), read with the `cryptography`
library, which gives those bits per key type (RSA: the PKCS#1 key; EC: the uncompressed point, the form RFC 5480
requires servers to support; Ed25519/Ed448: the raw key). An EC certificate carrying a compressed point would
get another fingerprint than libmgclient's, so the session is refused: closed, never open. The check itself runs
in the driver's TLS handshake (bolt_driver.PinnedContext).
"""
from __future__ import annotations

import re

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


def normal_fingerprint(text: str) -> str:
    """A fingerprint as lower-case hex without separators (`AB:cd` -> `abcd`)."""
    return re.sub(r"[^0-9a-f]", "", text.lower())


def public_key_bits(certificate_der: bytes) -> bytes:
    """The subjectPublicKey bits of an X.509 certificate (RFC 5280 4.1); ValueError for an unreadable
    certificate or a key type TLS servers do not use."""
    key = x509.load_der_x509_certificate(certificate_der).public_key()
    if isinstance(key, rsa.RSAPublicKey):
        return key.public_bytes(Encoding.DER, PublicFormat.PKCS1)
    if isinstance(key, ec.EllipticCurvePublicKey):
        return key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    if isinstance(key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        return key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    raise ValueError(f"a {type(key).__name__} key is not one bolt+s can pin")
