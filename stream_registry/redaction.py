"""Keeping secrets out of output: masking config maps and scrubbing error text.

A value is secret when its key looks secret (passwords, tokens, private keys,
the OAUTHBEARER configuration and extensions, ...), when it is a credential, or
when it equals one of those: a secret copied under an innocent key is masked
too. `secret_values` lists them all for `redact`, which scrubs free text
(error messages, logs).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "****"
_SECRET_KEY = re.compile(
    r"password|passphrase|secret|token|jaas|credential|api\.key"
    r"|\.pem\Z"                                     # PEM content: ssl.ca.pem, ssl.certificate.pem, key.pem
    r"|ssl\.key"                                    # ssl.key.pem, ssl.key.password, ssl.key.location
    r"|sasl\.oauthbearer\.(?:config|extensions)",   # 'clientSecret=...', extension values
    re.I)
# `key=value` pairs inside a secret config string (sasl.oauthbearer.config: "clientId=a clientSecret=b").
_PAIR = re.compile(r"([\w.-]+)\s*=\s*([^\s,;]+)")
MIN_SECRET_LENGTH = 3
# A field name and its key, as errors begin: `consumer_group: `, `configs['fetch.min.bytes']: `.
_FIELD_PREFIX = re.compile(r"[A-Za-z_]\w*(?:\[[^\]\s]*\])?: ")


def is_secret_key(key: str) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key))


def mask_all(values: Mapping[str, object]) -> dict[str, str]:
    """Credentials: every value is a secret."""
    return {key: MASK for key in values}


def mask_secrets(values: Mapping[str, object], secrets: Iterable[str] = ()) -> dict[str, object]:
    """Configs: mask the values whose key looks secret; scrub the others of any of `secrets`
    (a value equal to a secret becomes the mask)."""
    secrets = list(secrets)
    return {key: MASK if is_secret_key(key) else _scrubbed(value, secrets) for key, value in values.items()}


def secret_values(configs: Mapping[str, object] = {}, credentials: Mapping[str, object] = {}) -> list[str]:
    """Every value that must never be printed, longest first: all credentials, secret-looking configs,
    and the values of secret-looking `key=value` pairs inside them (an OAUTHBEARER client secret)."""
    values = [v for k, v in configs.items() if is_secret_key(k)] + list(credentials.values())
    parts = [value for text in values if isinstance(text, str)
             for key, value in _PAIR.findall(text) if is_secret_key(key)]
    return sorted({str(v) for v in values + parts if v not in (None, "")}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of a secret value in `text` by the mask."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_LENGTH:
            text = text.replace(secret, MASK)
    return text


def redact_error(text: str, secrets: Iterable[str]) -> str:
    """`redact` for a `field: reason` message, leaving the field's name whole: it is ours, never a secret
    (a secret `consumer` must not turn `consumer_group: …` into `****_group: …`, which names no field)."""
    match = _FIELD_PREFIX.match(text)
    if match is None:
        return redact(text, secrets)
    return match.group(0) + redact(text[match.end():], secrets)


def _scrubbed(value: object, secrets: list[str]) -> object:
    if not secrets or isinstance(value, bool) or value is None:
        return value
    text = str(value)
    if text in secrets:
        return MASK
    if isinstance(value, str):
        return redact(value, secrets)
    return value
