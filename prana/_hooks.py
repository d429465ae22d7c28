"""Webhook resume tokens: minted when a wait suspends, checked by the shell on delivery.

A token is ``<execution id, base64url>.<secret>``: the secret is 32 bytes from
``secrets`` (256 bits, URL-safe base64), and the execution id lets the shell find the
record without an index. The record keeps only ``token_digest``, a SHA-256 over the
execution id, the waiting node's key and the secret, so reading the store does not give
the power to resume, and a digest copied to another wait does not verify there. The
digest lives in exactly one suspension (execution, node, run, attempt): once that wait
resumes, expires or is cancelled, the token verifies against nothing (single use).

The plaintext exists only in memory, on the ``WebhookData`` of the ``Suspend`` outcome
the executor returns; the execution's own record never holds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "HOOK_PATH_PREFIX",
    "PENDING_TOKEN_PREFIX",
    "REDACTED",
    "SECRET_BYTES",
    "mint_token",
    "parse_token",
    "redact_tokens",
    "token_digest",
]

SECRET_BYTES = 32
"""Random bytes in a token's secret part (256 bits; the floor is 128)."""
HOOK_PATH_PREFIX = "/hooks/"
"""A token's resume path, relative to where the web app is mounted: ``/hooks/<token>``."""
PENDING_TOKEN_PREFIX = "__webhook__:"  # noqa: S105 - a state key prefix, not a secret
NO_TOKENS: dict[str, str] = {}
"""``Run.issued`` of every run that minted no resume token (shared, never written)."""
"""A token handed out by ``$webhooks.<key>`` waits in the shared state under this prefix plus
the node key (its digest only) until that node's webhook wait takes it."""
REDACTED = "[webhook-token]"
"""What a resume token is replaced with in recorded params, outputs and state."""
_MAX_TOKEN_CHARS = 2048


# base64, hashlib, hmac and secrets are imported where a token is minted or checked: a run
# without a webhook wait pays no import for them.


def _b64(raw: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def mint_token(execution_id: str) -> tuple[str, str]:
    """A fresh token for a wait of ``execution_id``: ``(token, secret)``."""
    import secrets

    secret = _b64(secrets.token_bytes(SECRET_BYTES))
    return f"{_b64(execution_id.encode())}.{secret}", secret


def token_digest(execution_id: str, node_key: str, secret: str) -> str:
    """What the record keeps: SHA-256 (hex) over execution id, node key and secret."""
    import hashlib

    material = "\x00".join(("prana-webhook-v1", execution_id, node_key, secret))
    return hashlib.sha256(material.encode()).hexdigest()


def parse_token(token: str) -> tuple[str, str] | None:
    """``(execution_id, secret)`` from a token, or ``None`` when it is not one."""
    if not isinstance(token, str) or len(token) > _MAX_TOKEN_CHARS:
        return None
    head, sep, secret = token.rpartition(".")
    if not sep or not head or len(secret) < 22:  # 22 base64 characters carry 128 bits
        return None
    import base64
    import binascii

    try:
        raw = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
        execution_id = raw.decode()
    except (binascii.Error, ValueError):
        return None
    if not execution_id or _b64(raw) != head or not execution_id.isprintable():
        return None  # a NUL or a control character names no execution (PostgreSQL refuses it)
    return execution_id, secret


def verify(token_digest_stored: str | None, execution_id: str, node_key: str, secret: str) -> bool:
    """Whether ``secret`` is the one a stored digest was made from (constant-time compare)."""
    if not token_digest_stored:
        return False
    expected = token_digest(execution_id, node_key, secret)
    import hmac

    return hmac.compare_digest(expected, token_digest_stored)


def redact_tokens(value: Any, tokens: Iterable[str]) -> Any:
    """``value`` with every occurrence of ``tokens`` in its strings replaced by ``REDACTED``.

    Builds new containers where something changed; the original is left as it was (the
    action still gets the real token).
    """
    found = tuple(tokens)
    if not found:
        return value
    return _redact(value, found)


def _redact(value: Any, tokens: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for token in tokens:
            if token in value:
                value = value.replace(token, REDACTED)
        return value
    if isinstance(value, dict):
        return {_redact(k, tokens): _redact(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, tokens) for v in value]
    return value
