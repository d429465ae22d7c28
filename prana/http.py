"""The ``http.request`` built-in action (installed with ``pip install 'prana-workflows[http]'``).

``Registry()`` registers it on its own when httpx is installed; import from here to
register it with a test transport, or to match its errors::

    from prana.http import register_http
    register_http(registry, transport=httpx.MockTransport(handler))
"""

from prana._http import (
    BODY_EXCERPT_CHARS,
    DEFAULT_TIMEOUT_SECONDS,
    RETRYABLE_STATUSES,
    HTTPRequestAction,
    HTTPRetryAfter,
    HTTPStatusError,
    http_available,
    register_http,
)

__all__ = [
    "BODY_EXCERPT_CHARS",
    "DEFAULT_TIMEOUT_SECONDS",
    "HTTPRequestAction",
    "HTTPRetryAfter",
    "HTTPStatusError",
    "RETRYABLE_STATUSES",
    "http_available",
    "register_http",
]
