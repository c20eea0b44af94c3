"""`envhub.client.endpoints.expand`: DNS names stand for every replica address, plain targets stay."""

from __future__ import annotations

import pytest

from envhub.client.endpoints import expand, several


def test_dns_names_expand_to_addresses_and_plain_targets_stay() -> None:
    assert expand(["dns:///localhost:50051", "10.1.2.3:7000", "dns:///127.0.0.1:9"]) == [
        "127.0.0.1:50051",
        "10.1.2.3:7000",
        "127.0.0.1:9",
    ]


def test_address_lists_stand_for_each_address_and_say_they_are_several() -> None:
    assert expand(["ipv4:127.0.0.1:7001,127.0.0.1:7002", "10.0.0.1:7"]) == [
        "127.0.0.1:7001",
        "127.0.0.1:7002",
        "10.0.0.1:7",
    ]
    assert expand(["ipv6:[::1]:7001"]) == ["[::1]:7001"]
    assert several("ipv4:127.0.0.1:7001,127.0.0.1:7002") and several("dns:///localhost:7001")
    assert not several("ipv4:127.0.0.1:7001") and not several("localhost:7001")


def test_a_dns_target_without_port_is_refused() -> None:
    with pytest.raises(ValueError, match="dns:///host:port"):
        expand(["dns:///localhost"])
