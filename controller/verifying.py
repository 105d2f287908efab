"""`camus-xdp controller verify DEVICE`: prove that what a switch holds gives what the
controller placed on it. The switch is read back as it is reached for pushes (P4Runtime as a
reader, or its switch directory), the rules are the device's current rule set, and the checker
(camus/verify) decides over every message: equal, or (a fitted cover) never fewer ports, or a
counterexample. An XDP host is checked on the host itself (`camus-xdp verify IFACE`)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from camus.verify.check import check_switch
from camus.verify.rules import TableDefect, Undecidable, read_rules
from camus.verify.targets import switch_p4_machine, written_p4_machine

from .targets import P4RuntimeTarget, SwitchDirTarget


@dataclass
class VerifyJob:
    """What one check needs, taken from the controller at one instant (under its lock): the
    rest runs outside it, for seconds at 100K rules."""
    device: str
    rules: str
    digest: str
    target: Any


class NotCheckable(Exception):
    """The device cannot be checked from here (404: no such device; 409: not now)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def verify_job(ctl: Any, device: str) -> VerifyJob:
    """The job for `device`, or NotCheckable: unknown, not a switch the controller reaches, or a
    push still pending (the switch may hold the version before)."""
    if device not in ctl.topology.devices:
        raise NotCheckable(f"no device {device!r} in the topology", 404)
    target = ctl.targets.get(device)
    if not isinstance(target, (P4RuntimeTarget, SwitchDirTarget)):
        what = "an XDP host: run `sudo camus-xdp verify IFACE` on it" if ctl.topology.kind(device) == "xdp" \
            else "not a switch the controller writes to"
        raise NotCheckable(f"{device} is {what}", 409)
    st = ctl.devices.get(device)
    tables = ctl.tables.get(device)
    if st is None or tables is None:
        raise NotCheckable(f"{device} has no tables yet", 409)
    if st.desired != st.applied:
        raise NotCheckable(f"{device}: a push is pending (desired {st.desired}, applied {st.applied or 'none'}); "
                           "verify once it is in sync", 409)
    return VerifyJob(device, tables.rules, st.desired, target)


def run_job(spec: Any, job: VerifyJob) -> dict[str, Any]:
    """Read the switch and decide (blocking: a thread's work). Exact first; a switch whose tables
    are not exact is checked as a cover (never fewer ports than the rules), and said so."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"device": job.device, "digest": job.digest, "rules": job.rules.count("\n")}
    try:
        rules = read_rules(spec, job.rules, f"{job.device}'s rules")
        t = job.target
        if isinstance(t, P4RuntimeTarget):
            machine = switch_p4_machine(spec, t.address, t.device_id, t.tls, t.tls_name)
        else:
            machine = written_p4_machine(spec, t.root / job.device)
        result, note = check_switch(rules, machine)
        if note:
            out["note"] = note
        out.update(result.to_json())
    except TableDefect as exc:
        out.update({"verdict": "differs", "reason": f"the switch's tables are ill-formed: {exc}"})
    except Undecidable as exc:
        out.update({"verdict": "undecidable", "reason": str(exc)})
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def verify_device(ctl: Any, device: str) -> dict[str, Any]:
    """verify_job then run_job, in this thread (tests, a controller without a service)."""
    return run_job(ctl.spec, verify_job(ctl, device))
