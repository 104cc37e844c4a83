"""Who a connection speaks for: its peer's address, or, when the peer is a proxy of
``TTS_TRUSTED_PROXIES``, the client that proxy names in ``X-Forwarded-For``. One answer for the
rate limits and slot shares (in a request) and the server's upload slots (in its poller)."""

from __future__ import annotations

import functools
import ipaddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def networks(trusted: tuple[str, ...]) -> tuple[Network, ...]:
    """The networks of ``TTS_TRUSTED_PROXIES``, parsed once."""
    return tuple(ipaddress.ip_network(network) for network in trusted)


def is_trusted(address: str, trusted: tuple[Network, ...]) -> bool:
    """Whether ``address`` is in one of the ``trusted`` networks (not an address: no)."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def client_address(peer: str, forwarded_for: str, trusted: tuple[Network, ...]) -> str:
    """The client's address: ``peer``, or, when the peer is trusted, the nearest address in
    ``forwarded_for`` that is not (a client may write any addresses in the header; only what
    trusted proxies appended counts)."""
    if not trusted or not is_trusted(peer, trusted):
        return peer
    forwarded = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(forwarded):
        if not is_trusted(hop, trusted):
            return hop
    return forwarded[0] if forwarded else peer
