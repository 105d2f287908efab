"""Table deltas in the kernel: random subscription changes written as deltas (new states under
new ids, one root write, old states cleared after their quarantine) into the loaded XDP
program's maps; after every change each message gets from the kernel exactly the ports a
compile from scratch of the same rules gives (the reference interpreter)."""
from __future__ import annotations

import random

import pytest

from camus.compiler.backends.ebpf.delta import EbpfLayout
from camus.compiler.backends.ebpf.contents import LEAF_CALL
from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.contents import MapContents
from camus.compiler.backends.emit import BackendError
from camus.compiler.codec.packets import build_packet, message_from_text, packet_addresses
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.incremental import IncrementalCompiler
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.structure.live_tables import LiveTables, NeedsFullWrite
from camus.dataplane.live import clear_states, write_delta
from camus.dataplane.program import XdpProgram
from tests.conftest import APPS

pytestmark = pytest.mark.bpf
BDD = CompileOptions(strategy="bdd")
PORTS: list[object] = list(range(1, 33))


def _itch_line(rng: random.Random) -> str:
    stock = rng.choice(["GOOGL", "MSFT", "AAPL", "IBM", "HD"])
    op = rng.choice([">", "<", "=="])
    extra = rng.choice(["", f" and shares > {rng.choice([10, 100, 500])}", f" or price == {rng.randint(1, 9)}"])
    return f"stock == {stock} and price {op} {rng.randint(1, 900)}{extra} : fwd({rng.randint(1, 32)})"


def _siena_line(rng: random.Random) -> str:
    rels = []
    for _ in range(rng.randint(1, 3)):
        a = rng.choice(["a0", "a1", "a3", "a2"])
        value = f'"{rng.choice(["alpha", "tango", "echo"])}"' if a == "a2" else str(rng.choice([0, 5, 20, 50, 99]))
        rels.append(f"{a} {rng.choice(['==', '<', '>', '!='])} {value}")
    return " and ".join(rels) + f" : fwd({rng.randint(1, 32)})"


def cover_flags(live: "Live") -> int:
    import ctypes

    from camus.dataplane.maps import Bypass
    value = Bypass()
    assert live.prog.maps.lookup("bypass", ctypes.c_uint32(live.bank), value)
    return value.flags


class Live:
    """A loaded program whose tables follow an incremental compiler by deltas."""

    def __init__(self, spec, limits: EbpfLimits | None = None) -> None:
        self.spec = spec
        self.limits = limits or EbpfLimits()
        self.prog = XdpProgram.load(spec, self.limits)
        self.inc = IncrementalCompiler(spec, BDD)
        self.inc.change([], [])
        self.bank = 0
        self.whole = 0
        self._fresh()

    def _fresh(self) -> int:
        """A whole write into the other bank (what LiveClassifier does on takeover)."""
        old = getattr(self, "layout", None)
        self.tables = LiveTables(self.inc.live.builder, self.inc.variables)
        self.layout = EbpfLayout(self.limits, 1 - self.bank if old else 0, PORTS, self.spec)
        self.bank = self.layout.bank
        md = self.layout.plan(self.tables.move(self.inc.live.root), self._widths())
        write_delta(self.prog.maps, md, self.layout.descs)
        if old is not None:
            clear_states(self.prog.maps, old.holding() + old.reclaim(everything=True))
        return md.writes()

    def _widths(self) -> dict[int, int]:
        return {v.index: v.width for v in self.inc.variables}

    def change(self, added: list[str], removed: list[str]) -> int:
        clear_states(self.prog.maps, self.layout.reclaim(now=float("inf")))   # tests need no grace
        root = self.inc.change(added, removed)
        try:
            delta = self.tables.move(root)
        except NeedsFullWrite:              # a range test in a table made exact: LiveClassifier's whole write
            self.whole += 1
            return self._fresh()
        md = self.layout.plan(delta, self._widths())
        write_delta(self.prog.maps, md, self.layout.descs)
        return md.writes()

    def check(self, lines: list[str], messages: list[dict]) -> None:
        want = PipelineInterpreter(compile_rules(self.spec, "".join(f"{ln}\n" for ln in lines),
                                                 options=BDD).pipeline)
        mask = MapContents(0, ports=PORTS)
        for m in messages:
            frame = build_packet(self.spec, [m], **packet_addresses(self.spec, m))
            got = self.prog.classify(frame)
            ports = mask.ports_of(got.messages[0][2]) if got.messages else ()
            assert ports == want.run(m).actions.ports, (m, lines)

    def close(self) -> None:
        self.prog.close()


@pytest.mark.parametrize("app", ["itch", "siena"])
def test_random_changes_as_deltas_classify_as_from_scratch(app: str) -> None:
    spec = load_spec(APPS / app / f"{app}.p4")
    line = _itch_line if app == "itch" else _siena_line
    rng = random.Random(12)
    if app == "itch":
        texts = [f"stock={rng.choice(['GOOGL', 'MSFT', 'AAPL', 'IBM', 'HD', 'ZZ'])} price={rng.randint(0, 950)} "
                 f"shares={rng.choice([5, 50, 300, 900])}" for _ in range(60)]
    else:
        texts = [" ".join(f"a{i}={rng.choice([0, 4, 5, 6, 20, 21, 50, 99])}" for i in (0, 1, 3, 4))
                 + f" a2={rng.choice(['alpha', 'tango', 'zulu'])} a5=x" for _ in range(60)]
    messages = [message_from_text(spec, t) for t in texts]
    live = Live(spec)
    try:
        lines: list[str] = []
        for step in range(40):
            if lines and rng.random() < 0.4:
                gone = [lines.pop(rng.randrange(len(lines))) for _ in range(min(len(lines), rng.randint(1, 2)))]
                live.change([], gone)
            else:
                new = [line(rng) for _ in range(rng.randint(1, 3))]
                lines += new
                live.change(new, [])
            if step == 25:
                live._fresh()                      # a whole write into the other bank, then deltas again
            live.check(lines, messages)
        for ln in list(lines):                     # everything removed: nothing delivered, nothing held
            live.change([], [ln])
        lines.clear()
        live.check(lines, messages)
        assert not live.layout.held
    finally:
        live.close()


def test_a_full_bank_raises_before_writing_and_keeps_the_old_tables() -> None:
    from camus.compiler.backends.ebpf.contents import CapacityError
    spec = load_spec(APPS / "itch" / "itch.p4")
    small = EbpfLimits(max_rnodes=1 << 9)           # 256 range buckets per bank
    live = Live(spec, small)
    try:
        lines = [f"stock == GOOGL and price > {p} : fwd({1 + p % 32})" for p in range(1, 40)]
        live.change(lines, [])
        live.check(lines, [message_from_text(spec, f"stock={s} price={p}") for s in ("GOOGL", "IBM") for p in (0, 5, 501)])
        held = dict(live.layout.held)
        more = [f"stock == MSFT and price == {p} : fwd({1 + p % 32})" for p in range(1, 300)]   # 600 starts
        root = live.inc.change(more, [])
        delta = live.tables.move(root)
        with pytest.raises(CapacityError):
            live.layout.plan(delta, live._widths())
        assert live.layout.held == held                # nothing of the delta stays allocated
        live.tables.move(delta.old_root)
        live.inc.change([], more)
        assert live.change(["stock == IBM and price > 500 : fwd(3)"], []) > 0     # deltas go on
        lines.append("stock == IBM and price > 500 : fwd(3)")
        live.check(lines, [message_from_text(spec, f"stock={s} price={p}") for s in ("GOOGL", "IBM") for p in (0, 5, 501)])
    finally:
        live.close()


def test_an_ila_task_moves_by_a_delta_and_custom_actions_the_program_cannot_run_are_refused() -> None:
    """ILA by deltas (IPv6 destinations are two 64-bit words, like any field): a task that moves
    is one rule out, one in, and the next datagram gets the new locator. An ila() for a program
    without an IPv6 feed is refused before anything is written."""
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    spec = load_spec(APPS / "ila" / "ila.p4")
    live = Live(spec)
    try:
        task = "2001:db8:5ea::1:42"
        frame = build_packet(spec, [{}], dst_ip=task, src_ip="2001:db8:5ea::1:99")
        first, moved = f"ipv6.dst == {task} : ila(2001:db8:a:1::)", f"ipv6.dst == {task} : ila(2001:db8:b:7::)"
        live.change([first], [])
        assert Ether(live.prog.run(frame).packet[8:])[IPv6].dst == "2001:db8:a:1::1:42"
        live.change([moved], [first])
        assert Ether(live.prog.run(frame).packet[8:])[IPv6].dst == "2001:db8:b:7::1:42"
        # the overload bypass's cover follows: the host's stack is in it while a rule calls
        assert cover_flags(live) == LEAF_CALL
        live.change(["ipv6.dst == 2001:db8::/32 : fwd(1)"], [moved])
        assert cover_flags(live) == 0
    finally:
        live.close()
    itch = Live(load_spec(APPS / "itch" / "itch.p4"))
    try:
        with pytest.raises(BackendError, match="no IPv6 header"):
            itch.change(["stock == GOOGL : ila(2001:db8:1:2::)"], [])
    finally:
        itch.close()
