"""Keeping secrets out of output: masking config maps and scrubbing error text."""
from __future__ import annotations

import re
from typing import Iterable, Mapping

MASK = "****"
_SECRET_KEY = re.compile(r"(password|secret|token|jaas|ssl\.key|credential|api\.key)", re.I)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def mask_all(values: Mapping[str, object]) -> dict[str, str]:
    """Credentials: every value is a secret."""
    return {key: MASK for key in values}


def mask_secrets(values: Mapping[str, object]) -> dict[str, object]:
    """Configs: mask only the values whose key looks secret."""
    return {key: MASK if is_secret_key(key) else value for key, value in values.items()}


def secret_values(configs: Mapping[str, object] = {}, credentials: Mapping[str, object] = {}) -> list[str]:
    """Every value that must never be printed: all credentials, secret-looking configs."""
    values = [v for k, v in configs.items() if is_secret_key(k)] + list(credentials.values())
    return sorted({str(v) for v in values if v not in (None, "")}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of a secret value in `text` by the mask."""
    for secret in secrets:
        if len(secret) >= 3:
            text = text.replace(secret, MASK)
    return text
