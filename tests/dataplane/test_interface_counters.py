"""`stats` shows the kernel's receive counters beside camus-xdp's: drops before XDP ran show only there."""
from __future__ import annotations

import pytest

from camus.dataplane.program import DataplaneError
from camus.dataplane.runtime import interface_counters


def test_the_loopback_interface_has_receive_counters() -> None:
    got = interface_counters("lo")                 # every network namespace has it
    assert {"rx_packets", "rx_dropped"} <= set(got) and all(isinstance(v, int) and v >= 0 for v in got.values())


def test_an_interface_not_here_has_none() -> None:
    assert interface_counters("camus-nope0") == {}


def test_a_name_that_is_a_path_is_refused() -> None:
    with pytest.raises(DataplaneError, match="not a valid interface name"):
        interface_counters("../../kernel")
