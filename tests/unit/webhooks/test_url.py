"""A callback URL as it is sent (``tts_queue.webhooks.url.sendable``): whitespace and control
characters refused, a non-ASCII host as its IDNA A-label, other non-ASCII percent-encoded."""

from __future__ import annotations

import pytest

from tts_queue.errors import InvalidCallbackUrl
from tts_queue.webhooks.url import sendable

UNSENDABLE = [
    "https://hooks.example/a b", "https://hooks.example/a\tb", "https://hooks.example/x\r\nX-Injected: 1",
    "https://hooks.example/\n", "https://hooks.exa\x00mple/", "https://hooks.example/\x7f",
    "https://hooks.example/\x85", "https://hooks.example/a\u00a0b", "https://hooks.example/\u2028",
    "https://hooks.exa\u200bmple/", "https://hooks.example/\u202egnp.exe", "https://hooks.example/\ud800",
    "https://hooks example/",
]


@pytest.mark.parametrize("url", UNSENDABLE)
def test_whitespace_and_control_characters_anywhere_are_refused(url: str) -> None:
    with pytest.raises(InvalidCallbackUrl, match="whitespace or control characters"):
        sendable(url)


@pytest.mark.parametrize(("url", "sent"), [
    ("https://hooks.example/done?id=7#top", "https://hooks.example/done?id=7#top"),  # ASCII as written
    ("https://Bücher.example/café?q=ü#ü", "https://xn--bcher-kva.example/caf%C3%A9?q=%C3%BC#%C3%BC"),
    ("https://straße.example:8443/", "https://xn--strae-oqa.example:8443/"),  # IDNA 2008: ß kept
    ("http://例え.テスト/パス", "http://xn--r8jz45g.xn--zckzah/%E3%83%91%E3%82%B9"),
    ("https://hooks.example/already%20encoded/ü", "https://hooks.example/already%20encoded/%C3%BC"),
])
def test_non_ascii_is_encoded_as_browsers_send_it(url: str, sent: str) -> None:
    assert sendable(url) == sent
    assert sendable(sent) == sent  # and what it sends passes as it is


@pytest.mark.parametrize("url", ["https://-bad-.ü/", "https://\u0301accent.example/", "https://a\u0660\u06f0.example/"])
def test_a_host_that_is_no_valid_internationalized_name_is_refused(url: str) -> None:
    with pytest.raises(InvalidCallbackUrl, match="IDNA"):
        sendable(url)
