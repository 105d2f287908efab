"""The command-level face of an attachment (dataplane/attachment.py owns its lifecycle): one
function per thing the CLI, the agent, the edge broker and the benches do to a unit by name."""
from __future__ import annotations

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.compiled import Compiled

from .attachment import Attachment, Progress, UpdateReport, silent
from .installed import Installed, UnitHold
from .journal import recover_unit
from .preflight import check_free

__all__ = ["Attachment", "UpdateReport", "already_live", "attach", "check_free", "detach", "live_root", "recover_unit",
           "set_bypass_pps", "stats", "update"]


def attach(iface: str, compiled: Compiled, spec_path: str, rules_path: str, mode: str = "native",
           limits: EbpfLimits | None = None, ports_path: str | None = None,
           xdp_redirect: bool = False, app: str = "", app_id: int = 0, fanout_mode: str = "auto",
           progress: Progress | None = None) -> Installed:
    """Attachment.attach; returns what was installed."""
    return Attachment.attach(iface, compiled, spec_path, rules_path, mode, limits, ports_path, xdp_redirect,
                             app, app_id, fanout_mode, progress or silent).installed


def update(unit: str, compiled: Compiled, rules_path: str, limits: EbpfLimits | None = None,
           progress: Progress | None = None, hold: UnitHold | None = None) -> UpdateReport:
    return Attachment(unit).update(compiled, rules_path, limits, progress or silent, hold)


def already_live(unit: str, key: str, rules_path: str) -> UpdateReport | None:
    return Attachment(unit).already_live(key, rules_path)


def detach(iface: str) -> str:
    return Attachment(iface).detach()


def stats(unit: str) -> dict[str, int]:
    return Attachment(unit).stats()


def live_root(unit: str) -> int:
    return Attachment(unit).live_root()


def set_bypass_pps(unit: str, pps: int) -> None:
    Attachment(unit).set_bypass_pps(pps)
