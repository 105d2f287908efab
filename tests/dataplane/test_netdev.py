"""dataplane/netdev.py: an interface's receive counters, which RPS masks are on, and disable/restore
on a fake /sys tree (no root)."""
from __future__ import annotations

from pathlib import Path

import pytest

from camus.dataplane import netdev
from camus.dataplane.program import DataplaneError


@pytest.mark.parametrize("mask,on", [("0", False), ("00000000", False), ("00,00000000", False),
                                     ("2", True), ("00000003", True), ("01,00000000", True), ("", False)])
def test_a_mask_is_on_when_it_names_a_cpu(mask: str, on: bool) -> None:
    assert netdev.rps_is_on(mask) == on


def test_disable_turns_off_only_what_was_on_and_restore_puts_it_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(netdev, "SYS_NET", tmp_path)
    for q, mask in (("rx-0", "00000002"), ("rx-1", "00000000"), ("rx-2", "00,00000001")):
        (tmp_path / "eth9" / "queues" / q).mkdir(parents=True)
        (tmp_path / "eth9" / "queues" / q / "rps_cpus").write_text(mask + "\n")
    read = lambda q: (tmp_path / "eth9" / "queues" / q / "rps_cpus").read_text().strip()   # noqa: E731
    found = netdev.disable_rps("eth9")
    assert found == {"rx-0": "00000002", "rx-2": "00,00000001"}
    assert [read(q) for q in ("rx-0", "rx-1", "rx-2")] == ["0", "00000000", "0"]
    assert netdev.rps_enabled("eth9") == {}
    netdev.restore_rps("eth9", found)
    assert [read(q) for q in ("rx-0", "rx-1", "rx-2")] == ["00000002", "00000000", "00,00000001"]
    netdev.restore_rps("gone0", found)                      # an interface gone meanwhile: nothing to do
    assert netdev.disable_rps("gone0") == {}


def test_the_loopback_interface_has_receive_counters() -> None:
    got = netdev.receive_counters("lo")                 # every network namespace has it
    assert {"rx_packets", "rx_dropped"} <= set(got) and all(isinstance(v, int) and v >= 0 for v in got.values())


def test_an_interface_not_here_has_none() -> None:
    assert netdev.receive_counters("camus-nope0") == {}


def test_a_name_that_is_a_path_is_refused() -> None:
    with pytest.raises(DataplaneError, match="not a valid interface name"):
        netdev.receive_counters("../../kernel")
