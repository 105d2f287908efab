"""Removing what an attachment installed, but its XDP hook: TC filters, RPS masks, pins, files,
the state file last (until then a detach can start over)."""
from __future__ import annotations

import shutil

from . import netdev
from .faults import fault
from .installed import Installed, attachment_dir, pin_dir, side_dirs, state_path
from .netlink import del_clsact, interface_exists


def remove_unit(inst: Installed) -> None:
    """Everything of an attachment but its XDP hook: TC filters, pins, files, state (last)."""
    del_clsact([i for i in inst.clsact or [] if interface_exists(i)])
    if inst.rps and interface_exists(inst.iface):
        netdev.restore_rps(inst.iface, inst.rps)      # as attach found it
    fault("detach:tc")
    shutil.rmtree(pin_dir(inst.unit), ignore_errors=True)
    for side in side_dirs(inst.unit):                   # what an interrupted grow left
        shutil.rmtree(side, ignore_errors=True)
    shutil.rmtree(attachment_dir(inst.unit), ignore_errors=True)
    fault("detach:pins")
    state_path(inst.unit).unlink(missing_ok=True)      # last: until then a detach can start over
