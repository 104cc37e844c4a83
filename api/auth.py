"""Who may call what: API keys, per-key isolation, admin-only views, rates and quotas.

Every route has an access level, declared next to its view with ``access(...)`` and kept in
``ACCESS``; a test walks the URL map and fails on a route without one:

- ``open``: health, readiness (its details only for admins when keys are required), metrics, the
  API's description and its page, static files;
- ``list``: the model and voice lists of the OpenAI-compatible routes: a key's, or open to anyone
  with ``TTS_PUBLIC_VOICE_LIST`` (Open WebUI asks for them without its key);
- ``key``: everything a client does with its own work;
- ``admin``: deployment-wide views (cache statistics).

With ``TTS_AUTH=off`` every caller is the anonymous principal (``None``), admin views are open, and
any ``Authorization`` header is ignored (OpenAI-style clients always send one). With ``required``
a request without a live key gets 401 ``unauthorized``. A key in the query string is always a 400
(``key_in_query``): access logs keep query strings. Submissions are rate-limited per key (the
key's own rate) through flask-limiter on the broker's Redis, shared by every API process, with one
counter for all the submission routes together (``shared_limit``: a key's rate is its rate, however
it spreads its submissions over ``/v1/tts``, ``/tts``, ``/v1/audio/speech`` and ``/v1/books``); with
auth off, per client address only when ``TTS_RATE_LIMIT`` is set, and with no limit at all nothing
is installed (no wrapper runs). A key with as much work queued as its quota gets 429
``quota_exceeded``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from flask import Flask, Response, current_app, g, request
from flask_limiter import Limiter
from flask_limiter.errors import RateLimitExceeded

import api.peers as peers
from api.services import Services
from tts_queue.access import quota, rates
from tts_queue.access.keys import Principal
from tts_queue.errors import Forbidden, KeyInQuery, RateLimited, Unauthorized
from tts_queue.settings import Settings

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., object])
OPEN, LIST, KEY, ADMIN = "open", "list", "key", "admin"
ACCESS: dict[str, str] = {}  # view function qualified name -> access level
QUERY_KEY_NAMES = ("api_key", "key", "token", "access_token")
LIMITER = "tts.limiter"


def access(level: str) -> Callable[[F], F]:
    """Declare a view's access level (``open``, ``list``, ``key`` or ``admin``)."""

    def mark(view: F) -> F:
        ACCESS[f"{view.__module__}.{view.__qualname__}"] = level
        return view

    return mark


def level_of(app: Flask, endpoint: str | None) -> str | None:
    """The access level of an endpoint (``None``: undeclared)."""
    if endpoint is None:
        return OPEN  # no route matched: the 404/405 is the answer
    if endpoint == "static":
        return OPEN
    view = app.view_functions.get(endpoint)
    return None if view is None else ACCESS.get(f"{view.__module__}.{view.__qualname__}")


def principal() -> Principal | None:
    """The caller's key (``None``: no auth, every caller is one anonymous tenant)."""
    found: Principal | None = g.get("principal")
    return found


def owner() -> str | None:
    """The id that owns what the caller makes and sees."""
    who = principal()
    return who.id if who is not None else None


def tenant_address() -> str | None:
    """With auth off, the caller's client address: whose fair share of the workers its tasks run
    in (``TaskRow.tenant``); ``None`` with a key (the key is the tenant)."""
    return client_address() if principal() is None else None


def is_admin() -> bool:
    """Whether the caller may see deployment-wide views (anyone, with auth off)."""
    who = principal()
    return who.admin if who is not None else not _required()


def require_admin() -> None:
    """403 ``forbidden`` unless the caller is an admin (or auth is off)."""
    if not is_admin():
        raise Forbidden("this view is for admin keys only")


def _required() -> bool:
    services: Services = current_app.extensions["tts"]
    return services.settings.api.auth == "required"


def _authenticate() -> None:
    """``before_request``: refuse keys in the query string; resolve the bearer key."""
    if any(name in request.args for name in QUERY_KEY_NAMES):
        raise KeyInQuery("send the key in the Authorization header (Bearer), never in the URL: "
                         "URLs are kept in access logs")
    services: Services = current_app.extensions["tts"]
    level = level_of(current_app, request.endpoint)
    if level is None:
        log.error("route %s has no access level; refusing it", request.endpoint)
        raise Forbidden("this route has no access decision")
    g.principal = None
    if services.settings.api.auth != "required":
        return
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    found = services.keys.verify(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
    if found is None and level != OPEN and not (level == LIST and services.settings.api.public_voice_list):
        raise Unauthorized("send a valid API key: Authorization: Bearer KEY")
    g.principal = found


def check_quota(keep: bool = False, rows: int = 1) -> None:
    """429 ``quota_exceeded`` when the caller's key has as much work queued as its quota, holds
    ``TTS_KEY_MAX_ROWS`` task rows, or (``keep``) pins ``TTS_KEY_MAX_PINNED_BYTES`` of audio; else
    the ``rows`` this submission writes are counted for the key (``tts_queue.access.quota``)."""
    services: Services = current_app.extensions["tts"]
    quota.check_quota(services.db, services.usage, principal(), services.settings.api, keep, rows)


def client_address() -> str:
    """The client's address: the connection's peer, or, when the peer is a proxy of
    ``TTS_TRUSTED_PROXIES``, the nearest address in ``X-Forwarded-For`` that is not one of them
    (``api.peers.client_address``)."""
    services: Services = current_app.extensions["tts"]
    return peers.client_address(request.remote_addr or "", request.headers.get("X-Forwarded-For", ""),
                                peers.networks(services.settings.api.trusted_proxies))


def _limit_key() -> str:
    return rates.rate_owner(owner(), client_address())


def _limit_value() -> str:
    who = principal()
    if who is not None:
        return who.rate
    services: Services = current_app.extensions["tts"]
    return services.settings.api.rate_limit or rates.UNLIMITED


def _not_limited() -> bool:
    services: Services = current_app.extensions["tts"]
    return principal() is None and not services.settings.api.rate_limit


def rate_limited(exc: RateLimitExceeded) -> RateLimited:
    """flask-limiter's refusal as the API's error (its ``Retry-After`` is set by the limiter)."""
    return RateLimited(f"more submissions than this key's rate allows ({exc.description}); retry later")


def _honest_retry_after(response: Response) -> Response:
    """flask-limiter truncates ``Retry-After`` (a refusal under a second from its reset says 0, and
    its reset time is itself rounded down): a client that obeys it can be refused again. With a
    moving window, waiting one whole window always works, so the header is at least 1 and a
    second more than the limiter's figure, never more than the window."""
    window = g.get("tts_limit_window_s")
    if response.status_code == 429 and window is not None:
        try:
            stated = int(response.headers.get("Retry-After", "0"))
        except ValueError:
            stated = window
        response.headers["Retry-After"] = str(max(1, min(stated + 1, window)))
    return response


def _private_when_keyed(response: Response) -> Response:
    """What a key fetched is its owner's: a shared cache (a CDN, a corporate proxy) must not keep it
    for whoever asks next with the same URL, so a cacheable keyed answer is ``private``."""
    if principal() is not None and response.cache_control.public:
        response.cache_control.public = False
        response.cache_control.private = True
    return response


def install(app: Flask, settings: Settings, submissions: list[str]) -> None:
    """Authentication before every request, rate limits on the ``submissions`` endpoints."""
    app.before_request(_authenticate)
    app.after_request(_private_when_keyed)
    if settings.api.auth != "required" and not settings.api.rate_limit:
        return  # no key and no address is limited: nothing to count, nothing wrapped
    app.after_request(_honest_retry_after)  # registered first: runs after the limiter's own headers
    # the same storage, prefix and scope as ``rates.SubmissionRates`` (the Wyoming server's): one
    # counter per key whatever the protocol
    limiter = Limiter(key_func=_limit_key, app=app, storage_uri=rates.storage_uri(settings),
                      headers_enabled=True, strategy="moving-window", key_prefix=rates.key_prefix(settings),
                      swallow_errors=True)
    app.extensions[LIMITER] = limiter
    shared = limiter.shared_limit(_limit_value, scope=rates.SCOPE, key_func=_limit_key,
                                  exempt_when=_not_limited)
    for endpoint in submissions:
        app.view_functions[endpoint] = shared(app.view_functions[endpoint])  # type: ignore[assignment]

    @app.errorhandler(RateLimitExceeded)
    def _limited(exc: RateLimitExceeded) -> tuple[Response, int]:
        from api.errors import to_response

        g.tts_limit_window_s = exc.limit.limit.get_expiry()
        response, status = to_response(rate_limited(exc))
        response.headers.pop("Retry-After", None)  # flask-limiter sets the honest one after this
        return response, status
