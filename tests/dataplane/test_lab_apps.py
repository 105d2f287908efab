"""Lab test (root, namespaces): one interface serving several applications (dataplane/apps.py).

ITCH (UDP 26400), the Kafka shim (UDP 9092, topic levels) and the attribute-pairs feed
(EtherType 0x9001, no IP) on one veth: each app's packets are filtered by that app's rules and
counted by that app's counters, updates touch one app, other traffic passes, detach removes
everything; a failure or crash part-way leaves nothing `detach` cannot remove."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane import counting, faults, installed as state
from camus.dataplane import apps, dispatch, runtime
from camus.dataplane.program import DataplaneError
from tests.conftest import APPS, ROOT
from tests.dataplane.test_lab_attach import BRK, NS, lab, received, sh  # noqa: F401  (lab: fixture)

pytestmark = pytest.mark.netns

SPECS = {"itch": APPS / "itch" / "itch.p4", "kafka": APPS / "kafka" / "kafka.p4", "attrs": APPS / "attrs" / "pairs.p4"}
RULES = {"itch": "stock == GOOGL : fwd(1)\n", "kafka": 'topic == "orders" : fwd(1)\n', "attrs": "kind == 3 : fwd(2)\n"}


def _apps(tmp_path, names=("itch", "kafka", "attrs"), rules=RULES) -> list[apps.App]:
    out = []
    for name in names:
        path = tmp_path / f"{name}.txt"
        path.write_text(rules[name])
        spec = load_spec(SPECS[name])
        out.append(apps.App(name, compile_rules(spec, rules[name], options=CompileOptions(count_rules=64)),
                            str(SPECS[name]), str(path)))
    return out


@pytest.fixture
def apps_lab(lab):  # noqa: F811  (lab: the veth pair fixture)
    yield
    if dispatch.dispatch_record_path(BRK).exists() or list(state.STATE_ROOT.glob(f"{BRK}@*.json")):
        runtime.detach(BRK)


CRASH = """
import pathlib, sys
from tests.dataplane.test_lab_apps import _apps
from camus.dataplane import apps, counting, faults
apps.attach_apps(sys.argv[1], _apps(pathlib.Path(sys.argv[2]), ("itch", "kafka")))
"""


def _frames(mac: bytes) -> dict[str, bytes]:
    def feed(app: str, text: str) -> bytes:
        spec = load_spec(SPECS[app])
        return build_packet(spec, [message_from_text(spec, text)], dst_mac=mac, src_ip="10.77.0.1", dst_ip="10.77.0.2")
    return {"itch+": feed("itch", "stock=GOOGL price=5"), "itch-": feed("itch", "stock=IBM price=5"),
            "kafka+": feed("kafka", "topic=orders partition=1"), "kafka-": feed("kafka", "topic=clicks partition=1"),
            "attrs+": feed("attrs", "kind=3 sensor=1"), "attrs-": feed("attrs", "kind=2 sensor=1")}


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_three_apps_share_a_veth_each_with_its_rules_counters_and_updates(apps_lab, tmp_path, mode: str) -> None:
    mac = bytes.fromhex(sh("cat", f"/sys/class/net/{BRK}/address").stdout.strip().replace(":", ""))
    f = _frames(mac)
    apps.attach_apps(BRK, _apps(tmp_path), mode)
    order = ["itch+", "itch-", "kafka+", "kafka-", "attrs+", "attrs-"]
    assert received([f[k] for k in order]) == [True, False, True, False, True, False]
    ping = sh("ip", "netns", "exec", NS, "ping", "-c", "1", "-W", "2", "10.77.0.2", check=False)
    assert ping.returncode == 0, "traffic no app claims passes untouched"
    for app in ("itch", "kafka", "attrs"):        # each app counted its own two packets only
        s = runtime.stats(f"{BRK}@{app}")
        assert (s["packets"], s["deliver"], s["no_match"], s["other"]) == (2, 1, 1, 0), (app, s)
        assert counting.rule_counts(f"{BRK}@{app}") == [(RULES[app].strip(), 1)]
    counts = dispatch.dispatch_counts(BRK)
    assert (counts["itch"], counts["kafka"], counts["attrs"]) == (2, 2, 2) and counts["unclaimed"] >= 2

    # An update of one app: the others keep their tables (and their counts).
    kafka = load_spec(SPECS["kafka"])
    runtime.update(f"{BRK}@kafka", compile_rules(kafka, 'topic == "clicks" : fwd(1)\n'), "clicks.txt")
    assert received([f[k] for k in order]) == [True, False, False, True, True, False]
    assert counting.rule_counts(f"{BRK}@itch") == [(RULES["itch"].strip(), 2)]

    # The CLI names an app with --app; without it, a shared interface says to.
    out = CliRunner().invoke(main, ["stats", BRK, "--app", "attrs"], catch_exceptions=False).output
    assert "packets=4" in out and "kind == 3 : fwd(2)" in out, out
    whole = CliRunner().invoke(main, ["stats", BRK], catch_exceptions=False).output
    assert "dispatch:" in whole and "[itch]" in whole and "[kafka]" in whole, whole
    status = CliRunner().invoke(main, ["status"], catch_exceptions=False).output
    assert f"{BRK} app kafka" in status, status
    assert f"{BRK}: {mode} XDP dispatcher for 3 apps: itch (UDP port 26400); kafka (UDP port 9092); " \
           "attrs (EtherType 0x9001)" in status, status

    assert "detached with their interface" in str(pytest.raises(DataplaneError, runtime.detach, f"{BRK}@itch").value)
    runtime.detach(BRK)
    assert received([f["itch-"], f["kafka-"], f["attrs-"]]) == [True, True, True]
    assert "prog/xdp" not in sh("ip", "-d", "link", "show", BRK).stdout
    assert not list(state.PIN_ROOT.glob(f"{BRK}*")) and not list(state.STATE_ROOT.glob(f"{BRK}*.json"))
    assert not dispatch.dispatch_record_path(BRK).exists()


def test_failures_install_nothing(apps_lab, tmp_path, monkeypatch) -> None:
    """(Refusals of the app list itself: tests/dataplane/test_apps_plan.py, no root.)"""
    both = _apps(tmp_path, ("itch", "kafka"))
    # A failure after the apps were installed takes every one out again ...
    def broken():
        raise DataplaneError("dispatcher failed to load (injected)")
    monkeypatch.setattr(apps, "load_dispatcher", broken)
    with pytest.raises(DataplaneError, match="injected"):
        apps.attach_apps(BRK, both)
    monkeypatch.undo()
    assert not list(state.PIN_ROOT.glob(f"{BRK}*")) and not list(state.STATE_ROOT.glob(f"{BRK}*.json"))
    # ... and a crash (SIGKILL after the dispatcher was pinned, before it was attached) leaves
    # what `detach` removes.
    child = subprocess.run([sys.executable, "-c", CRASH, BRK, str(tmp_path)], capture_output=True, text=True,
                           cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), faults.FAULT_ENV: "apps:pinned"})
    assert child.returncode == -9, child.stderr
    assert list(state.STATE_ROOT.glob(f"{BRK}@*.json"))
    assert "leftover" in runtime.detach(BRK)
    assert not list(state.PIN_ROOT.glob(f"{BRK}*")) and not list(state.STATE_ROOT.glob(f"{BRK}*.json"))
    # Usable again, through the CLI and a config file's `apps:` list (`sudo camus-xdp attach IFACE`).
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apps:\n" + "".join(f"  - {{name: {a.name}, spec: {a.spec_path}, rules: {a.rules_path}}}\n"
                                       for a in both))
    out = CliRunner().invoke(main, ["attach", BRK, "--config", str(cfg)], catch_exceptions=False).output
    assert "serving 2 apps" in out and "itch: UDP port 26400" in out and "kafka: UDP port 9092" in out, out
    with pytest.raises(DataplaneError, match="already has camus-xdp attached"):
        apps.attach_apps(BRK, both)
    with pytest.raises(DataplaneError, match="serves several apps: name one with --app"):
        runtime.stats(BRK)
    runtime.detach(BRK)
