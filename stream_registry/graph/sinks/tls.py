"""The TLS boundary of `bolt+s://` and `?fingerprint=` pinning.

pymgclient accepts any certificate (libmgclient never sets a verify mode, see
mgtransport.c `mg_secure_transport_init`); it only reports the server key's
fingerprint to a `trust_callback`. So bolt+s verifies the certificate here
first, with Python's `ssl` and the system CAs (host name included), and holds
the driver's own session to the key it verified (`TrustKey`).

The fingerprint is what libmgclient reports: SHA-512 of the certificate's
subjectPublicKey bits (OpenSSL's X509_pubkey_digest). The certificate is read
with the `cryptography` library, which gives those bits per key type (RSA:
the PKCS#1 key; EC: the uncompressed point, the form RFC 5480 requires
servers to support; Ed25519/Ed448: the raw key). An EC certificate carrying a
compressed point would get another fingerprint than libmgclient's, so the
driver's session is refused: closed, never open.
"""
from __future__ import annotations

import hashlib
import re
import socket
import ssl

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ...errors import SinkError


def normal_fingerprint(text: str) -> str:
    """A fingerprint as lower-case hex without separators (`AB:cd` -> `abcd`)."""
    return re.sub(r"[^0-9a-f]", "", text.lower())


class TrustKey:
    """pymgclient's trust_callback: accept the TLS session only if the server key is `fingerprint`."""

    __slots__ = ("fingerprint",)

    def __init__(self, fingerprint: str):
        self.fingerprint = normal_fingerprint(fingerprint)

    def __call__(self, hostname: str, ip_address: str, key_type: str, fingerprint: str) -> bool:
        return normal_fingerprint(str(fingerprint)) == self.fingerprint

    def __repr__(self) -> str:
        return f"TrustKey({self.fingerprint[:16]}...)"


def verified_server_key(host: str, port: int, *, where: str, timeout: float = 10.0) -> str:
    """Handshake with the system CAs and host name checking (`ssl.create_default_context()`); return the
    server key's fingerprint as libmgclient computes it, in hex.

    An untrusted certificate is a SinkError (not retried); an unreachable server an OSError (retried).
    """
    context = ssl.create_default_context()
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                der = tls.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError as exc:
        raise SinkError(f"sink {where}: the server's certificate is not trusted: {exc.verify_message or exc} "
                        f"(bolt+s verifies it against the system CAs and the host name; for a server with a "
                        f"self-signed certificate use bolt+ssc://, with ?fingerprint= to pin its key)") from None
    except ssl.SSLError as exc:
        raise SinkError(f"sink {where}: TLS handshake failed: {exc.reason or exc}") from None
    try:
        return hashlib.sha512(public_key_bits(der or b"")).hexdigest()
    except ValueError as exc:
        raise SinkError(f"sink {where}: cannot read the server's certificate: {exc}") from None


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
