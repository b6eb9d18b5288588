"""bolt+s pins the key of the certificate it verified: the fingerprint is SHA-512 of the certificate's
subjectPublicKey bits, as libmgclient reports it to trust_callback (tests/test_hostile_input.py checks it
against the real driver for a P-256 certificate; here every key type a TLS server uses, without a network)."""
from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import NameOID

from stream_registry.graph.sinks.tls import TrustKey, public_key_bits


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


def test_the_driver_is_held_to_the_pinned_key_whatever_its_separators_and_case():
    trust = TrustKey("AB:cd:01")
    assert trust("h", "127.0.0.1", "rsaEncryption", "ab:CD:01") and not trust("h", "127.0.0.1", "rsa", "abcd02")
    assert "ab" in repr(trust) and len(repr(trust)) < 40
