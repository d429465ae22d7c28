"""Where ``http.request`` may connect: public addresses unless the application says more.

A workflow definition is data, and its URLs are templated from input: without a rule, a
definition could make the worker call its own loopback services, the cloud metadata
endpoint (169.254.169.254) or anything on the private network (SSRF). The rule is the
application's, never the definition's: ``register_http(registry, allow_private_hosts=True)``
lifts it, ``allow_networks=[...]`` opens named networks only.

Checked twice: every address the host name resolves to before anything is sent, and the
address actually connected to (so a name that re-resolves elsewhere between the two,
DNS rebinding, is caught before a byte of the request leaves). Redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

from prana._errors import InvalidSettingsError, NonRetryable

__all__ = ["EgressPolicy"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


_SIX_TO_FOUR_RELAY = ipaddress.ip_network("192.88.99.0/24")
"""The 6to4 relays' anycast network (RFC 3068, deprecated): a gateway, not a public host."""
_LAST_32_BITS = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64, well-known prefix (RFC 6052)
    ipaddress.ip_network("64:ff9b:1::/48"),  # NAT64, local use (RFC 8215)
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated)
    ipaddress.ip_network("::ffff:0:0/96"),  # IPv4-translated (SIIT)
)
"""IPv6 networks whose addresses carry an IPv4 address in their last 32 bits."""


def _embedded(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (6to4, NAT64, compatible), if any."""
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in net for net in _LAST_32_BITS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _kind(address: Address) -> str | None:
    """Why ``address`` is not public (``"loopback"``, ...), or ``None`` when it is.

    An IPv6 address carrying an IPv4 one is judged as that IPv4 address too: Python calls
    ``2002:7f00:1::`` (6to4 of 127.0.0.1) and ``64:ff9b::a9fe:a9fe`` global.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _kind(address.ipv4_mapped)
    for name in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if not address.is_global:
        return "non-global"
    if isinstance(address, ipaddress.IPv4Address):
        return "6to4-relay" if address in _SIX_TO_FOUR_RELAY else None
    inner = _embedded(address)
    if inner is None:
        return None
    kind = _kind(inner)
    return None if kind is None else f"{kind} (it carries {inner})"


class EgressPolicy:
    """The addresses ``http.request`` may connect to: public ones, plus what the app allows."""

    __slots__ = ("allow_private_hosts", "networks")

    def __init__(
        self, *, allow_private_hosts: bool = False, allow_networks: Iterable[Any] = ()
    ) -> None:
        if not isinstance(allow_private_hosts, bool):
            raise InvalidSettingsError(
                f"http.request: allow_private_hosts={allow_private_hosts!r}: use True or False"
            )
        networks: list[Network] = []
        for item in allow_networks:
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except (TypeError, ValueError):
                raise InvalidSettingsError(
                    f"http.request: allow_networks: {item!r} is not an address or network such as "
                    "'10.1.0.0/16' or '127.0.0.1'"
                ) from None
        self.allow_private_hosts = allow_private_hosts
        self.networks = tuple(networks)

    def __repr__(self) -> str:
        nets = [str(n) for n in self.networks]
        return (
            f"EgressPolicy(allow_private_hosts={self.allow_private_hosts}, allow_networks={nets})"
        )

    def refusal(self, host: str, address: str) -> NonRetryable | None:
        """The error for connecting to ``address`` (resolved from ``host``), or ``None``."""
        if self.allow_private_hosts:
            return None
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone id: fe80::1%eth0
        except ValueError:
            return NonRetryable(f"http.request: {host!r} resolved to {address!r}, not an address")
        kind = _kind(ip)
        if kind is None or any(ip in net for net in self.networks):
            return None
        shown = host if host == str(ip) else f"{host} ({ip})"
        return NonRetryable(
            f"http.request: params.url: {shown} is a {kind} address; this application lets "
            "http.request reach public addresses only (the application, not the workflow, "
            "may allow more: register_http(registry, allow_networks=[...]) or "
            "allow_private_hosts=True)"
        )

    def check_resolved(self, host: str, infos: Iterable[Any]) -> None:
        """Raise for the first address of ``getaddrinfo``'s answer that is not allowed."""
        for info in infos:
            error = self.refusal(host, str(info[4][0]))
            if error is not None:
                raise error

    def check_literal(self, host: str) -> None:
        """Raise when ``host`` is an IP address that is not allowed (no resolving needed)."""
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return
        error = self.refusal(host, host)
        if error is not None:
            raise error

    def resolve(self, host: str, port: int) -> None:
        """Resolve ``host`` and raise unless every address it names is allowed."""
        if self.allow_private_hosts:
            return
        self.check_resolved(host, socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))

    def peer_refusal(self, host: str, stream: Any) -> NonRetryable | None:
        """The error for the address ``stream`` connected to, or ``None`` when allowed."""
        if self.allow_private_hosts:
            return None
        peer = stream.get_extra_info("server_addr")
        if not peer:
            return None
        return self.refusal(host, str(peer[0]))

    def check_peer(self, host: str, stream: Any) -> None:
        """Raise (closing ``stream``) when the address it connected to is not allowed."""
        error = self.peer_refusal(host, stream)
        if error is not None:
            stream.close()
            raise error

    async def acheck_peer(self, host: str, stream: Any) -> None:
        """``check_peer`` for an async stream."""
        error = self.peer_refusal(host, stream)
        if error is not None:
            await stream.aclose()
            raise error
