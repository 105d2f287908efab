"""Interface names reach paths under /sys/fs/bpf/camus and /run/camus: every name is checked by
the kernel's rules first, so a hostile name changes nothing outside (no root needed: the
check comes before anything else)."""
from __future__ import annotations

import pytest

from camus.dataplane import installed as state
from camus.dataplane.program import DataplaneError

HOSTILE = ["", ".", "..", "../..", "a/b", "/", "x" * 16, "eth0:1", "eth 0", "eth\n0", "eth\x000"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_interface_names_are_refused(name: str) -> None:
    with pytest.raises(DataplaneError, match="not a valid interface name"):
        state.pin_dir(name)
    with pytest.raises(DataplaneError, match="not a valid interface name"):
        state.state_path(name)


def test_valid_names_stay_below_the_roots() -> None:
    for name in ("eth0", "veth-a.1", "x" * 15, "ens3f0np0"):
        assert state.pin_dir(name).parent == state.PIN_ROOT
        assert state.state_path(name).parent == state.STATE_ROOT
