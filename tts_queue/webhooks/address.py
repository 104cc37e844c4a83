"""Which addresses a webhook may reach, and a DNS lookup with a deadline of its own.

- ``refusal(ip)``: why an address is not plainly public unicast (``None`` when it is). The ranges
  are listed here explicitly, so the answer does not depend on what the running Python's
  ``ipaddress.is_global`` says (3.11 calls NAT64, 6to4 and 192.0.0.192 global); on top of the
  list, whatever ``ipaddress`` calls private, reserved, multicast, link-local or not global is
  refused too, and an IPv6 address must be in the global unicast block ``2000::/3``. An IPv4
  address inside IPv6 (mapped ``::ffff:a.b.c.d``) is judged as the IPv4 address it carries.
- ``Resolver``: ``getaddrinfo`` on a few daemon threads of its own, waited on until a deadline,
  so a slow resolver holds at most those threads, never the caller's past the deadline; the
  threads are shared fairly between keys (``tts_queue.fairness.slots``), so one key's slow-resolving
  hosts hold at most its share and another key's lookups still run.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tts_queue.fairness.slots import FairSlots

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
LOOKUP_THREADS = 4  # lookups in flight per process; the rest wait (at most their deadline) for one

# Every IPv4 range that is not plainly public unicast, with why (RFC 6890 and its successors).
REFUSED_V4: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments (192.0.0.192: cloud metadata)"),
    ("192.0.2.0/24", "documentation"),
    ("192.31.196.0/24", "AS112"),
    ("192.52.193.0/24", "AMT"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("192.175.48.0/24", "AS112 direct delegation"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved (255.255.255.255: broadcast)"),
)

# Every IPv6 range inside or beside global unicast that is not plainly public unicast.
REFUSED_V6: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("64:ff9b::/96", "NAT64"),
    ("64:ff9b:1::/48", "local NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/32", "Teredo"),
    ("2001:2::/48", "benchmarking"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)

_V4 = tuple((ipaddress.IPv4Network(net), why) for net, why in REFUSED_V4)
_V6 = tuple((ipaddress.IPv6Network(net), why) for net, why in REFUSED_V6)
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")


def refusal(address: str | IPAddress) -> str | None:
    """Why ``address`` is not one a webhook may reach, or ``None`` for a plainly public unicast one."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0]) if isinstance(address, str) else address
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # the kernel connects to the IPv4 address it carries
    listed = _V4 if isinstance(ip, ipaddress.IPv4Address) else _V6
    for network, why in listed:
        if ip in network:
            return why
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST:
        return "outside IPv6 global unicast (2000::/3)"
    if (ip.is_private or ip.is_reserved or ip.is_multicast or ip.is_link_local or ip.is_loopback
            or ip.is_unspecified or not ip.is_global):
        return "not global (ipaddress)"
    return None


Lookup = Callable[..., list[Any]]


class Resolver:
    """``getaddrinfo`` with a deadline, on at most ``threads`` lookups in flight at once, shared
    fairly between owners (keys): one owner holds at most half of them, and less beside others.

    Each lookup runs on a daemon thread that holds one slot until ``getaddrinfo`` itself returns;
    the caller waits for its answer no longer than its deadline (waiting for a slot of its share
    included), so a resolver that never answers costs ``threads`` threads, and each caller its
    deadline; one owner's hosts that never answer cost the others nothing but a smaller share."""

    def __init__(self, threads: int = LOOKUP_THREADS, lookup: Lookup = socket.getaddrinfo) -> None:
        self.slots = FairSlots(threads, 0.5)
        self._freed = threading.Condition()
        self.lookup = lookup

    def _take(self, owner: str, until: float) -> bool:
        """A slot of ``owner``'s share, waiting for one until ``until``; whether it got one."""
        with self._freed:
            while not self.slots.take(owner):
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self._freed.wait(left)
        return True

    def _give_back(self, owner: str) -> None:
        self.slots.give_back(owner)
        with self._freed:
            self._freed.notify_all()

    def addresses(self, host: str, port: int, deadline_s: float, owner: str = "") -> list[str] | None:
        """The distinct addresses ``host`` resolves to, in the resolver's order; ``None`` when it
        does not resolve, resolves to nothing, or does not answer within ``deadline_s``."""
        until = time.monotonic() + deadline_s
        if not self._take(owner, until):
            return None
        answer: list[list[Any]] = []
        done = threading.Event()

        def run() -> None:
            try:
                answer.append(self.lookup(host, port, type=socket.SOCK_STREAM))
            except (OSError, UnicodeError, ValueError):
                pass
            finally:
                self._give_back(owner)
                done.set()

        threading.Thread(target=run, name="callback-lookup", daemon=True).start()
        if not done.wait(max(0.0, until - time.monotonic())) or not answer:
            return None
        found = list(dict.fromkeys(str(info[4][0]) for info in answer[0]))
        return found or None
