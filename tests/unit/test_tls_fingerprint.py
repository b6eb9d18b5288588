"""bolt+s and bolt+ssc pin a server key: the fingerprint is SHA-512 of the certificate's subjectPublicKey bits,
as libmgclient reports it (what earlier releases pinned), for every key type a TLS server uses; and the TLS
context the neo4j driver is given holds a real handshake to it."""
from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import NameOID

from stream_registry.graph.sinks.bolt_driver import tls_context
from stream_registry.graph.sinks.tls import public_key_bits


def certificate(key) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memgraph")])
    now = dt.datetime.now(dt.UTC)
    digest = None if isinstance(key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)) else hashes.SHA256()
    built = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now)
             .not_valid_after(now + dt.timedelta(days=1)).sign(key, digest))
    return built.public_bytes(serialization.Encoding.DER)


@pytest.mark.parametrize("key", [
    rsa.generate_private_key(65537, 2048), ec.generate_private_key(ec.SECP256R1()),
    ec.generate_private_key(ec.SECP384R1()), ed25519.Ed25519PrivateKey.generate(),
    ed448.Ed448PrivateKey.generate()], ids=["rsa", "p256", "p384", "ed25519", "ed448"])
def test_the_fingerprinted_bits_are_the_certificates_subject_public_key(key):
    der = certificate(key)
    spki = key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    bits = public_key_bits(der)
    # SubjectPublicKeyInfo ends with the BIT STRING: its unused-bits byte (0), then the key bits
    assert spki.endswith(b"\x00" + bits) and spki in der and len(bits) >= 32


def test_a_key_type_tls_servers_do_not_use_and_a_broken_certificate_are_refused():
    with pytest.raises(ValueError, match="DSAPublicKey key is not one bolt\\+s can pin"):
        public_key_bits(certificate(dsa.generate_private_key(2048)))
    with pytest.raises(ValueError):
        public_key_bits(b"\x30\x03not")


def test_a_handshake_is_held_to_the_pinned_key_whatever_its_separators_and_case(tmp_path):
    import hashlib
    import socket
    import ssl
    import threading

    key = ec.generate_private_key(ec.SECP256R1())
    der = certificate(key)
    (tmp_path / "cert.pem").write_bytes(ssl.DER_cert_to_PEM_cert(der).encode())
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(count: int) -> None:
        for _ in range(count):
            raw, _ = listener.accept()
            try:
                server.wrap_socket(raw, server_side=True).close()
            except (ssl.SSLError, OSError):
                raw.close()

    threading.Thread(target=serve, args=(2,), daemon=True).start()
    pin = hashlib.sha512(public_key_bits(der)).hexdigest()
    shown = ":".join(pin[i:i + 2] for i in range(0, len(pin), 2)).upper()

    def handshake(fingerprint: str) -> None:
        context = tls_context("bolt+ssc", fingerprint)
        assert context is not None
        with socket.create_connection(listener.getsockname()) as raw:
            context.wrap_socket(raw, server_hostname="memgraph").close()

    handshake(shown)
    with pytest.raises(ssl.SSLError, match="is not the pinned fingerprint"):
        handshake("ab" * 64)
    listener.close()
    assert tls_context("bolt", "ab") is None
    verified = tls_context("bolt+s", None)
    assert verified is not None and verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname
