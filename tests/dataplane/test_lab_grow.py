"""Lab test (root, namespaces): an update that outgrows the attached program grows it under
traffic (dataplane/grow.py): a larger program takes over in one step, nothing is lost, no packet
sees a mix of the two programs' tables, counters carry over and nothing of the old one is left."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane import attachment, counting, runtime
from camus.dataplane.attachment import Attachment
from camus.dataplane.bpfinfo import map_id
from camus.dataplane.grow import our_tc_filters, staging_dir
from camus.dataplane.installed import PIN_ROOT, load_installed
from camus.dataplane.maps import MapSet
from camus.dataplane.program import DataplaneError
from tests.conftest import APPS
from tests.dataplane.test_lab_forwarding import BRK, SUBS, send_and_capture, update_under_feed
from tests.dataplane import test_lab_forwarding as forwarding

pytestmark = pytest.mark.netns


@pytest.fixture
def lab(tmp_path):
    """test_lab_forwarding's lab: a publisher, the broker and three subscribers; its ports file."""
    yield from forwarding.lab.__wrapped__(tmp_path)
OLD = "stock == GOOGL : fwd(1)\nstock == AAPL : fwd(2)\n"
# 40 more symbols: more exact slots than the program attached below holds (8 per bank)
NEW = "stock == GOOGL : fwd(1)\nstock == MSFT : fwd(2)\n" + "".join(f"stock == Z{i:03d} : fwd(3)\n" for i in range(40))


def _ports_id(unit: str) -> int:
    maps = MapSet.from_pins(PIN_ROOT / unit)
    try:
        return map_id(maps.fds["ports_cfg"])
    finally:
        maps.close()


def test_an_update_that_outgrows_the_program_grows_it_under_traffic(lab: Path) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    count_opts = CompileOptions(count_rules=64)
    runtime.attach(BRK, compile_rules(spec, OLD, options=count_opts), str(APPS / "itch" / "itch.p4"), "old", "native",
                   limits=EbpfLimits(max_exact=16), ports_path=str(lab))
    ifaces = [BRK] + [s[1] for s in SUBS.values()]
    old_ports = _ports_id(BRK)
    assert len(our_tc_filters(ifaces, old_ports)) == 4         # TC in on the broker, out on three ports
    reports: list[runtime.UpdateReport] = []
    n, sub1, seen = update_under_feed(spec, lambda: reports.append(
        runtime.update(BRK, compile_rules(spec, NEW, options=count_opts), "new")))
    assert reports[0].grown and "stock == Z039 : fwd(3)" in reports[0].added
    assert sorted(r for pkt in sub1 for r in pkt) == [3 * k + 1 for k in range(n)]   # unchanged: nothing lost
    assert all(s in (["AAPL"], ["MSFT"]) for s in seen)            # one program's tables per packet
    switch = next(i for i, s in enumerate(seen) if s == ["MSFT"])
    assert switch > 0 and all(s == ["AAPL"] for s in seen[:switch]) and all(s == ["MSFT"] for s in seen[switch:])
    assert len(seen) == n                                        # nothing lost across the swap
    # Counters carried over: the unchanged rule's and the packet counts of both programs.
    counts = counting.rule_counts(BRK)
    assert counts[:2] == [("stock == GOOGL : fwd(1)", n), ("stock == MSFT : fwd(2)", n - switch)]
    assert all(n == 0 for _, n in counts[2:])
    stats = runtime.stats(BRK)
    assert stats["packets"] >= n and stats["port 1"] == n and stats["port 2"] == n
    # Only the grown program is left: its TC filters alone, its pins in the usual place.
    inst = load_installed(BRK)
    assert inst.limits().max_exact > 16 and inst.generation == 1 and inst.pending is None
    assert our_tc_filters(ifaces, old_ports) == []
    assert len(our_tc_filters(ifaces, _ports_id(BRK))) == 4
    assert not staging_dir(inst).exists() and sorted(p.name for p in PIN_ROOT.iterdir() if BRK in p.name) == [BRK]
    # An ordinary update goes on in the grown program.
    again = runtime.update(BRK, compile_rules(spec, OLD, options=count_opts), "old")
    assert not again.grown and load_installed(BRK).generation == 1


def test_the_attachment_grows_on_request_and_keeps_serving(lab: Path) -> None:
    """Attachment.grow: a program sized for the rules replaces the attached one even when they
    fit (the owner of the lifecycle exposes it; update calls it when rules outgrow the program)."""
    spec = load_spec(APPS / "itch" / "itch.p4")
    unit = Attachment.attach(BRK, compile_rules(spec, OLD), str(APPS / "itch" / "itch.p4"), "old", "native",
                             limits=EbpfLimits(max_exact=16), ports_path=str(lab))
    assert unit.installed.generation == 0 and unit.installed.limits().max_exact == 16
    old_ports = _ports_id(BRK)
    report = unit.grow(compile_rules(spec, NEW), "new")
    inst = unit.installed
    assert report.grown and "stock == Z039 : fwd(3)" in report.added and "stock == AAPL : fwd(2)" in report.removed
    assert inst.generation == 1 and inst.pending is None and inst.rules.endswith("new")
    assert _ports_id(BRK) != old_ports and unit.live_root() == inst.root
    ifaces = [BRK] + [s[1] for s in SUBS.values()]
    assert our_tc_filters(ifaces, old_ports) == [] and len(our_tc_filters(ifaces, _ports_id(BRK))) == 4
    stats = unit.stats()                       # the grown program's counters (the lab's own IPv6 chatter may count)
    assert {"packets", "port 1", "port 2", "port 3"} <= set(stats)
    assert unit.detach() == "" and not (PIN_ROOT / BRK).exists()


def test_a_grow_that_fails_before_the_swap_leaves_the_old_program_serving(lab: Path, monkeypatch) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    runtime.attach(BRK, compile_rules(spec, OLD), str(APPS / "itch" / "itch.p4"), "old", "native",
                   limits=EbpfLimits(max_exact=16), ports_path=str(lab))
    ifaces = [BRK] + [s[1] for s in SUBS.values()]
    old_ports = _ports_id(BRK)
    from camus.dataplane import grow

    def refuse(*_a, **_k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(grow, "_swap_xdp", refuse)
    with pytest.raises(DataplaneError, match="the old one keeps serving"):
        runtime.update(BRK, compile_rules(spec, NEW), "new")
    inst = load_installed(BRK)
    assert inst.generation == 0 and inst.pending is None and inst.rules.endswith("old")
    assert _ports_id(BRK) == old_ports and len(our_tc_filters(ifaces, old_ports)) == 4
    assert sum(1 for line in subprocess.run(["tc", "filter", "show", "dev", BRK, "ingress"], capture_output=True,
                                            text=True).stdout.splitlines() if "camus_tc_in" in line) == 1
    assert not staging_dir(inst).exists()


def test_one_of_two_apps_grows_behind_the_dispatcher(lab: Path, tmp_path: Path, monkeypatch) -> None:
    """App `a` outgrows its program: the dispatcher's slot takes the grown one; app `b`, sharing
    the interface and subscriber 1's, is untouched and both deliver exactly after the swap."""
    import random

    from camus.compiler.semantics.interpreter import PipelineInterpreter
    from camus.dataplane import apps
    from camus.lab.namespaces import mold_order_refs
    from tests.dataplane.test_lab_forwarding import itch_feed
    spec_a = load_spec(APPS / "itch" / "itch.p4")
    other = tmp_path / "itch_b.p4"
    other.write_text((APPS / "itch" / "itch.p4").read_text().replace("udp_port(26400)", "udp_port(26500)"))
    spec_b = load_spec(other)
    ports_b = tmp_path / "ports_b.yaml"
    ports_b.write_text(f"1: {{iface: {SUBS[1][1]}}}\n")
    b = compile_rules(spec_b, "stock == IBM : fwd(1)\n")
    small = EbpfLimits(max_exact=16)
    with monkeypatch.context() as m:       # attach sizes the programs small: the next update outgrows a's
        m.setattr(attachment, "sized_limits", lambda *_a: small)
        apps.attach_apps(BRK, [apps.App("a", compile_rules(spec_a, OLD), str(APPS / "itch" / "itch.p4"), "a", str(lab)),
                               apps.App("b", b, str(other), "b-rules", str(ports_b))], "native")
    b_ports = _ports_id(f"{BRK}@b")
    new_a = compile_rules(spec_a, NEW)
    assert runtime.update(f"{BRK}@a", new_a, "a2").grown
    assert load_installed(f"{BRK}@a").generation == 1 and _ports_id(f"{BRK}@b") == b_ports
    brk_mac = bytes.fromhex(Path(f"/sys/class/net/{BRK}/address").read_text().strip().replace(":", ""))
    want: dict = {1: [], 2: [], 3: [], 4: []}
    frames, want = itch_feed(spec_a, PipelineInterpreter(new_a.pipeline), random.Random(5), 30,
                             ["GOOGL", "AAPL", "MSFT", "Z001"], want, dst_mac=brk_mac, src_ip="10.78.0.1",
                             dst_ip="10.78.0.2")
    want_b: dict = {1: []}
    frames_b, _ = itch_feed(spec_b, PipelineInterpreter(b.pipeline), random.Random(6), 20, ["IBM", "GOOGL"], want_b,
                            first_ref=1_000_000, dst_mac=brk_mac, src_ip="10.78.0.1", dst_ip="10.78.0.2",
                            dst_port=26500)
    got = {p: [r for pkt in pkts for r in mold_order_refs(pkt if p == 3 else pkt[14 + 20 + 8:])]
           for p, pkts in send_and_capture(frames + frames_b, (1, 2, 3)).items()}
    assert sorted(got[1]) == sorted(want[1] + want_b[1]) and want[1] and want_b[1]
    assert sorted(got[2]) == sorted(want[2]) and want[2]
    assert sorted(got[3]) == sorted(want[3]) and want[3]             # the grown program's new rules
    runtime.detach(BRK)
    assert not [p for p in PIN_ROOT.iterdir() if BRK in p.name] if PIN_ROOT.exists() else True
