"""Which callback URLs the service calls.

``UrlPolicy``: what a callback URL a request names may be (at submission, ``check``): a URL a
request can carry (``tts_queue.webhooks.url.sendable``: no whitespace or control characters; a
non-ASCII host as its IDNA A-label, other non-ASCII percent-encoded, and stored so),
``http``/``https`` only, a host, no credentials, at most 2,048 characters, a port of
``TTS_WEBHOOK_PORTS`` (80 and 443), and, unless ``TTS_WEBHOOK_ALLOW_PRIVATE``, a host whose every
address is plainly public unicast (``tts_queue.webhooks.address.refusal``), looked up within
``TTS_WEBHOOK_LOOKUP_TIMEOUT_S``. A host that does not resolve and one that is not allowed get the
very same answer, so a key cannot learn which internal names exist. ``target`` checks again at each
delivery (the name may point elsewhere by then) and the delivery connects to the address it
checked, so DNS cannot swap it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tts_queue.errors import InvalidCallbackUrl
from tts_queue.settings import WebhookSettings
from tts_queue.webhooks.address import Resolver, refusal
from tts_queue.webhooks.url import sendable

MAX_URL_CHARS = 2048
DEFAULT_PORTS = (80, 443)
# One answer for a host that does not resolve (or not in time) and for one that is not allowed.
HOST_REFUSED = ("callback_url's host must resolve, within the lookup deadline, to public addresses "
                "only; this one does not, or is not allowed")


class UnresolvedHost(InvalidCallbackUrl):
    """A callback host that did not resolve in time: to a client the same as a refused one; at a
    delivery, a failed attempt (retried), not a refusal."""


@dataclass(frozen=True)
class Target:
    """Where a delivery goes: the URL's parts and the checked address to connect to."""

    scheme: str
    host: str
    port: int
    path: str
    address: str


@dataclass(frozen=True)
class UrlPolicy:
    """Which callback URLs the service calls (``TTS_WEBHOOK_ALLOW_PRIVATE``, ``TTS_WEBHOOK_PORTS``,
    ``TTS_WEBHOOK_LOOKUP_TIMEOUT_S``), with the resolver its lookups share."""

    allow_private: bool = False
    ports: tuple[int, ...] = DEFAULT_PORTS
    lookup_s: float = 2.0
    resolver: Resolver = field(default_factory=Resolver, compare=False, repr=False)

    @classmethod
    def from_settings(cls, webhooks: WebhookSettings) -> UrlPolicy:
        """The policy the settings describe."""
        return cls(webhooks.allow_private, webhooks.ports, webhooks.lookup_timeout_s)

    def check(self, url: Any, owner: str | None = None) -> str:
        """``url`` (stripped) as it will be sent (``sendable``) if the service may call it, else
        ``InvalidCallbackUrl`` (its lookup within ``owner``'s share of the resolver)."""
        if not isinstance(url, str) or not url.strip():
            raise InvalidCallbackUrl("callback_url must be an http(s) URL")
        cleaned: str = url.strip()
        if len(cleaned) > MAX_URL_CHARS:
            raise InvalidCallbackUrl(f"callback_url is longer than {MAX_URL_CHARS} characters")
        cleaned = sendable(cleaned)
        if len(cleaned) > MAX_URL_CHARS:
            raise InvalidCallbackUrl(f"callback_url is longer than {MAX_URL_CHARS} characters once "
                                     "percent-encoded")
        self.target(cleaned, owner=owner)
        return cleaned

    def target(self, url: str, lookup_s: float | None = None, owner: str | None = None) -> Target:
        """The parts of ``url`` and one checked address of its host (``InvalidCallbackUrl`` if
        none, or if it cannot be sent; ``lookup_s``: the lookup's deadline, the policy's by
        default; ``owner``: whose share of the resolver it takes)."""
        try:
            parts = urlsplit(sendable(url))  # a row stored before ``check`` encoded is refused or encoded
            port = parts.port
        except ValueError:
            raise InvalidCallbackUrl("callback_url is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidCallbackUrl("callback_url must be an http(s) URL with a host")
        if parts.username or parts.password:
            raise InvalidCallbackUrl("callback_url must not carry credentials (they would be logged)")
        port = port or (443 if parts.scheme == "https" else 80)
        if port not in self.ports:
            raise InvalidCallbackUrl(f"callback_url's port must be one of "
                                     f"{', '.join(map(str, self.ports))} (TTS_WEBHOOK_PORTS)")
        addresses = self.addresses(parts.hostname, port, self.lookup_s if lookup_s is None else lookup_s,
                                   owner)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(parts.scheme, parts.hostname, port, path, addresses[0])

    def addresses(self, host: str, port: int, lookup_s: float, owner: str | None = None) -> list[str]:
        """The addresses ``host`` resolves to within ``lookup_s``, every one allowed; else the one
        answer ``HOST_REFUSED`` (``UnresolvedHost`` when it did not resolve)."""
        addresses = self.resolver.addresses(host, port, lookup_s, owner or "")
        if addresses is None:
            raise UnresolvedHost(HOST_REFUSED)
        if not self.allow_private and any(refusal(address) for address in addresses):
            raise InvalidCallbackUrl(HOST_REFUSED)
        return addresses


def check_url(url: Any, allow_private: bool, ports: tuple[int, ...] = DEFAULT_PORTS) -> str:
    """``url`` if the service may call it, else ``InvalidCallbackUrl`` (``UrlPolicy.check``)."""
    return UrlPolicy(allow_private, ports).check(url)


def target(url: str, allow_private: bool, ports: tuple[int, ...] = DEFAULT_PORTS) -> Target:
    """The parts of ``url`` and one checked address of its host (``UrlPolicy.target``)."""
    return UrlPolicy(allow_private, ports).target(url)


def public_addresses(host: str, port: int, allow_private: bool) -> list[str]:
    """The addresses ``host`` resolves to, all allowed, else ``InvalidCallbackUrl``."""
    policy = UrlPolicy(allow_private)
    return policy.addresses(host, port, policy.lookup_s)
