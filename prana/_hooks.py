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

import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "DELIVERED_PREFIX",
    "HOOK_PATH_PREFIX",
    "NO_SECRETS",
    "PENDING_TOKEN_PREFIX",
    "REDACTED",
    "SECRET_BYTES",
    "SECRET_KEY",
    "SECRET_REDACTED",
    "delivered",
    "delivery_digest",
    "mint_token",
    "parse_token",
    "redact_tokens",
    "token_digest",
    "used_token",
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
DELIVERED_PREFIX = "__delivered__:"  # prana._model compares states without these
"""Once a webhook wait resumed, the shared state keeps under this prefix plus the node key
``delivery_digest`` of its token and data, so the same delivery repeated (a sender cut off
mid-request) is known for what it is, by whoever holds the token only."""
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


def delivery_digest(token_digest_stored: str, data: Any) -> str | None:
    """What the state keeps of a delivery: the token's digest, ``:``, and a SHA-256 (hex)
    over that digest and the data as sorted JSON (the same value sent with other spacing or
    key order is the same delivery); ``None`` for data JSON cannot hold."""
    import hashlib

    import orjson

    try:
        body = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    material = b"\x00".join((b"prana-webhook-delivery-v1", token_digest_stored.encode(), body))
    return f"{token_digest_stored}:{hashlib.sha256(material).hexdigest()}"


def _deliveries(state: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(node key, kept)`` of every delivery the state keeps."""
    return [
        (key[len(DELIVERED_PREFIX) :], kept)
        for key, kept in state.items()
        if isinstance(key, str) and key.startswith(DELIVERED_PREFIX) and isinstance(kept, str)
    ]


def used_token(state: Mapping[str, Any], execution_id: str, secret: str) -> bool:
    """Whether ``secret`` is the one of a token whose wait resumed (constant-time compare)."""
    import hmac

    for node_key, kept in _deliveries(state):
        expected = token_digest(execution_id, node_key, secret)
        if hmac.compare_digest(expected, kept.partition(":")[0]):
            return True
    return False


def delivered(state: Mapping[str, Any], execution_id: str, secret: str, data: Any) -> bool:
    """Whether ``data`` is what was delivered with the token of ``secret`` to a webhook wait
    of this execution that resumed (constant-time compare of the whole record kept)."""
    import hmac

    for node_key, kept in _deliveries(state):
        digest = delivery_digest(token_digest(execution_id, node_key, secret), data)
        if digest is not None and hmac.compare_digest(digest, kept):
            return True
    return False


SECRET_KEY = "\x00secret:"  # noqa: S105 - a key prefix, not a secret
"""``Run.issued`` holds the application's secrets under this prefix plus their name."""
SECRET_REDACTED = "[secret]"  # noqa: S105 - the marker, not a secret
"""What a ``$secrets`` value is replaced with in what the record keeps."""
NO_SECRETS: Mapping[str, str] = MappingProxyType({})
"""``Run.secrets`` of a run whose registry has none."""
_MIN_NEEDLE = 8
"""An encoded form shorter than this is not searched for (it would match ordinary text)."""


def redact_tokens(value: Any, issued: Mapping[str, str]) -> Any:
    """``value`` with every token and secret of ``issued`` (``Run.issued``) in its strings
    replaced by ``REDACTED`` (or ``SECRET_REDACTED``), in the encodings ``_encodings`` names.

    Builds new containers where something changed; the original is left as it was (the
    action still gets the real token).
    """
    if not issued:
        return value
    return _redact(value, _needles(tuple(issued.items())))


@functools.lru_cache(maxsize=256)
def _needles(items: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """What to look for, longest first, and what replaces it: each token whole, then the
    secret part of a token (a secret value whole), each in every encoding of ``_encodings``."""
    found: dict[str, str] = {}
    for key, text in items:
        mark = SECRET_REDACTED if key.startswith(SECRET_KEY) else REDACTED
        found.setdefault(text, mark)
        core = text if mark == SECRET_REDACTED else text.rpartition(".")[2]
        for needle in _encodings(core):
            if len(needle) >= _MIN_NEEDLE:
                found.setdefault(needle, mark)
    return tuple(sorted(found.items(), key=lambda pair: -len(pair[0])))


def _encodings(text: str) -> set[str]:
    """``text`` as it appears written in the encodings an action's output commonly holds:
    itself, percent-encoded (``quote``, ``quote_plus``), HTML- and JSON-escaped, hex (both
    cases), and base64 (standard and URL-safe) at each of the three offsets it may start at
    inside a longer encoded text, the characters it shares with its neighbours left out.
    Not matched (the action's duty): base64 broken into lines (MIME bodies), quoted-printable,
    compression, encryption, or the text cut or transformed."""
    import base64
    import html
    import json
    import urllib.parse

    raw = text.encode()
    hexed = raw.hex()
    forms = {
        text,
        urllib.parse.quote(text, safe=""),
        urllib.parse.quote_plus(text),
        html.escape(text),
        json.dumps(text)[1:-1],
        hexed,
        hexed.upper(),
    }
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for shift in range(3):
            coded = encode(b"\0" * shift + raw).decode()
            forms.add(coded[-(-shift * 8 // 6) : (shift + len(raw)) * 8 // 6])
    return forms


def _redact(value: Any, needles: tuple[tuple[str, str], ...]) -> Any:
    if isinstance(value, str):
        for needle, mark in needles:
            if needle in value:
                value = value.replace(needle, mark)
        return value
    if isinstance(value, dict):
        return {_redact(k, needles): _redact(v, needles) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, needles) for v in value]
    return value
