"""The callback address policy: every refused range, the ports rule, one answer for a host that
does not resolve and one that is not allowed, and a lookup that stops waiting at its deadline.

No test here touches the network: the resolver's lookup is a fake that answers what the test says.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from tts_queue.errors import InvalidCallbackUrl
from tts_queue.webhooks.address import REFUSED_V4, REFUSED_V6, Resolver, refusal
from tts_queue.webhooks.policy import HOST_REFUSED, UrlPolicy, check_url


def answering(table: dict[str, list[str]]) -> Any:
    """A ``getaddrinfo`` that resolves the names in ``table`` and raises ``gaierror`` for others."""
    def lookup(host: str, port: int, type: int = 0) -> list[Any]:  # noqa: A002 - getaddrinfo's name
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        family = {True: socket.AF_INET6, False: socket.AF_INET}
        return [(family[":" in a], type, 6, "", (a, port)) for a in table[host]]
    return lookup


def policy(table: dict[str, list[str]], **changes: Any) -> UrlPolicy:
    return UrlPolicy(resolver=Resolver(lookup=answering(table)), **changes)


@pytest.mark.parametrize("address", [
    "0.0.0.0", "0.1.2.3",                           # this network, unspecified
    "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1",  # RFC 1918
    "127.0.0.1", "127.255.0.1",                     # loopback
    "169.254.169.254",                              # link-local (cloud metadata)
    "100.64.0.1", "100.127.255.254",                # shared address space
    "192.0.0.1", "192.0.0.192", "192.0.0.170",      # IETF assignments (192.0.0.192: metadata)
    "192.0.2.1", "198.51.100.7", "203.0.113.9",     # documentation
    "198.18.0.1", "198.19.255.1",                   # benchmarking
    "192.88.99.1",                                  # 6to4 relay anycast
    "224.0.0.1", "239.255.255.250",                 # multicast
    "240.0.0.1", "255.255.255.255",                 # reserved, broadcast
    "::", "::1",                                    # unspecified, loopback
    "::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:192.0.0.192",  # mapped
    "::10.0.0.1", "::8.8.8.8",                      # IPv4-compatible (deprecated)
    "64:ff9b::a00:1", "64:ff9b::808:808", "64:ff9b:1::1",  # NAT64, even of a public IPv4
    "2002::1", "2002:808:808::1",                   # 6to4
    "2001::1", "2001:0:4136:e378::1",               # Teredo
    "2001:2::1",                                    # benchmarking
    "2001:db8::1", "3fff::1",                       # documentation
    "fc00::1", "fd12:3456::1",                      # unique local
    "fe80::1", "fe80::1%eth0",                      # link-local (with a zone)
    "fec0::1",                                      # site-local
    "ff02::1", "ff0e::1",                           # multicast
    "100::1",                                       # discard-only
    "4000::1", "::2",                               # outside global unicast
])
def test_every_address_that_is_not_plainly_public_unicast_is_refused(address: str) -> None:
    assert refusal(address) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "1.1.1.1", "::ffff:8.8.8.8",
                                     "2606:4700:4700::1111", "2a00:1450:4001::1"])
def test_plainly_public_unicast_addresses_are_allowed(address: str) -> None:
    assert refusal(address) is None


def test_each_listed_range_is_refused_at_both_ends() -> None:
    import ipaddress

    # Given every range the policy lists
    for network, _ in (*REFUSED_V4, *REFUSED_V6):
        net = ipaddress.ip_network(network)
        # Then its first and last address are refused, whatever is_global says on this Python
        assert refusal(str(net[0])) and refusal(str(net[-1])), network


def test_a_host_that_does_not_resolve_and_a_private_one_get_the_very_same_answer() -> None:
    rules = policy({"internal.example": ["10.0.0.5"], "metadata.example": ["192.0.0.192"]})
    answers = []
    for url in ("http://nowhere.example/hook", "http://internal.example/hook", "http://metadata.example/"):
        with pytest.raises(InvalidCallbackUrl) as caught:
            rules.check(url)
        answers.append((caught.value.code, caught.value.message))
    assert answers == [("invalid_callback_url", HOST_REFUSED)] * 3
    assert all(name not in HOST_REFUSED for name in ("nowhere", "internal", "metadata", "10.0.0.5"))


def test_one_refused_address_among_public_ones_refuses_the_host() -> None:
    rules = policy({"mixed.example": ["93.184.216.34", "64:ff9b::a00:1"]})
    with pytest.raises(InvalidCallbackUrl):
        rules.check("https://mixed.example/")


def test_only_ports_80_and_443_unless_widened() -> None:
    table = {"hooks.example": ["93.184.216.34"]}
    # Given the default policy
    rules = policy(table)
    assert rules.check("http://hooks.example/a") == "http://hooks.example/a"
    assert rules.check("https://hooks.example:443/a")
    assert rules.check("http://hooks.example:80/a")
    for url in ("http://hooks.example:8080/", "https://hooks.example:22/", "http://hooks.example:6379/"):
        with pytest.raises(InvalidCallbackUrl, match="TTS_WEBHOOK_PORTS"):
            rules.check(url)
    # Then TTS_WEBHOOK_PORTS widens the list, and only by what it names
    wider = policy(table, ports=(80, 443, 8443))
    assert wider.check("https://hooks.example:8443/")
    with pytest.raises(InvalidCallbackUrl):
        wider.check("http://hooks.example:8080/")


def test_allow_private_lifts_the_address_rule_but_not_the_ports_rule() -> None:
    rules = policy({"localhost": ["127.0.0.1"]}, allow_private=True)
    assert rules.check("http://localhost/hook")
    with pytest.raises(InvalidCallbackUrl, match="port"):
        rules.check("http://localhost:6379/")
    assert check_url("http://[::1]/", allow_private=True)


def test_a_lookup_stops_waiting_at_its_deadline_on_a_bounded_number_of_threads() -> None:
    # Given a resolver whose lookups never answer until the test lets them
    release = threading.Event()
    calls: list[str] = []

    def stuck(host: str, port: int, type: int = 0) -> list[Any]:  # noqa: A002
        calls.append(host)
        release.wait(30)
        return [(socket.AF_INET, type, 6, "", ("93.184.216.34", port))]

    resolver = Resolver(threads=2, lookup=stuck)
    rules = UrlPolicy(lookup_s=0.05, resolver=resolver)
    try:
        # When more lookups are asked than it has threads
        for _ in range(4):
            with pytest.raises(InvalidCallbackUrl) as caught:
                rules.check("https://slow.example/")
            # Then each is refused with the one answer once its deadline passes
            assert caught.value.message == HOST_REFUSED
        # And one asker's lookups held at most its share (half): the others found none in time
        assert len(calls) <= 1 and resolver.slots.held_by("") == 1 and resolver.slots.free == 1
    finally:
        release.set()
    # And once the resolver answers, its threads are free again
    fresh = Resolver(lookup=answering({"a.example": ["8.8.8.8"]}))
    assert fresh.addresses("a.example", 443, 1.0) == ["8.8.8.8"]


def test_one_keys_slow_lookups_leave_another_keys_lookup_answered() -> None:
    # Given a resolver of four threads, and one key whose hosts never answer
    release = threading.Event()

    def lookup(host: str, port: int, type: int = 0) -> list[Any]:  # noqa: A002
        if host.endswith("slow.example"):
            release.wait(30)
        return [(socket.AF_INET, type, 6, "", ("93.184.216.34", port))]

    resolver = Resolver(threads=4, lookup=lookup)
    slow = UrlPolicy(lookup_s=0.05, resolver=resolver)
    try:
        # When that key asks for many lookups, each waiting out its deadline
        for number in range(6):
            with pytest.raises(InvalidCallbackUrl):
                slow.check(f"https://{number}.slow.example/", owner="tarpit")
        # Then it holds only its share of the threads
        assert resolver.slots.held_by("tarpit") == 2
        # And another key's callback URL is checked and accepted at once
        fine = UrlPolicy(lookup_s=1.0, resolver=resolver)
        assert fine.check("https://fast.example/hook", owner="other") == "https://fast.example/hook"
    finally:
        release.set()


def test_the_ports_setting_is_a_comma_separated_list() -> None:
    from tts_queue.errors import ConfigError
    from tts_queue.settings import Settings, current_values

    settings = Settings.from_env({"TTS_WEBHOOK_PORTS": "80, 443,8443"})
    assert settings.webhooks.ports == (80, 443, 8443)
    assert current_values(settings)["TTS_WEBHOOK_PORTS"] == "80,443,8443"
    assert Settings().webhooks.ports == (80, 443) and Settings().webhooks.concurrency == 4
    for bad in ("0", "http", "80,70000"):
        with pytest.raises(ConfigError):
            Settings.from_env({"TTS_WEBHOOK_PORTS": bad})
    assert UrlPolicy.from_settings(settings.webhooks).ports == (80, 443, 8443)
