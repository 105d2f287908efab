"""Crash tests' fault points and the wait for packets in flight: shared by every step that
changes an attachment (update, grow, apps, detach)."""
from __future__ import annotations

import os
import signal


FAULT_ENV = "CAMUS_FAULT"   # crash tests: `CAMUS_FAULT=update:flipped` kills -9 the process there
GRACE_S = 0.05     # in-flight packets finish within an RCU grace period; generous margin


def fault(step: str) -> None:
    """Fault injection for the crash tests: SIGKILL this process at `step` when asked to."""
    if os.environ.get(FAULT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
