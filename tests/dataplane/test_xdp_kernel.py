"""Kernel tests: the generated XDP program, loaded for real and driven with BPF_PROG_TEST_RUN,
against the IR interpreter. One program per spec; every rule set only rewrites maps."""
from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.compile import compile_files, compile_rules
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.dataplane.program import XdpProgram
from camus.dataplane.reference import expected_verdict
from tests.compiler.strategies import FieldDef, RandomSpec, messages, rule_files
from tests.conftest import APPS

pytestmark = pytest.mark.bpf
LIMITS = EbpfLimits(max_msgs=12, max_states=1 << 13, max_exact=1 << 13, max_bounds=1 << 14,
                    max_lpm=1 << 12, max_updates=256)

SPECS = {
    "mixed": RandomSpec((FieldDef("f0", 24, "auto", True, ()), FieldDef("f1", 12, "range", False, (0, 7, 100, 4095)),
                         FieldDef("f2", 32, "lpm", False, (0, 0x0A000001, 0x0A010000, 0xFFFFFFFF)),
                         FieldDef("f3", 8, "exact", False, (0, 1, 2, 255))), False, mold=True),
    "numbers": RandomSpec((FieldDef("f0", 16, "auto", False, (0, 5, 9, 1000, 65535)),
                           FieldDef("f1", 4, "auto", False, (0, 3, 15)),
                           FieldDef("f2", 32, "range", False, (0, 50, 1 << 31, 0xFFFFFFFF))), False, mold=False),
}
for name, sd in list(SPECS.items()):   # string pools are derived like the strategies do
    if sd.fields[0].string:
        from tests.compiler.strategies import WORDS, _word_value
        f0 = sd.fields[0]
        SPECS[name] = RandomSpec((FieldDef(f0.name, f0.width, f0.kind, True,
                                           tuple(_word_value(w, f0.width) for w in WORDS)),) + sd.fields[1:],
                                 sd.counter, sd.mold)


def load_random_spec_programs(limits: EbpfLimits) -> dict:
    """name -> (spec definition, spec, loaded program) for every spec of SPECS."""
    loaded = {}
    for name, sd in SPECS.items():
        spec = parse_spec(sd.text(), f"{name}.p4")
        loaded[name] = (sd, spec, XdpProgram.load(spec, limits))
    return loaded


@pytest.fixture(scope="module")
def programs():
    loaded = load_random_spec_programs(LIMITS)
    loaded["itch"] = (None, load_spec(APPS / "itch" / "itch.p4"), XdpProgram.load(load_spec(APPS / "itch" / "itch.p4"), LIMITS))
    yield loaded
    for _, _, prog in loaded.values():
        prog.close()


def install(prog: XdpProgram, compiled, previous=None):
    contents = map_contents(compiled.pipeline, compiled.spec, LIMITS)
    if previous is not None:
        prog.remove(previous)
    prog.write(contents)
    return contents


def check_packet(prog: XdpProgram, compiled, contents, interp, pkt: bytes) -> None:
    want = expected_verdict(compiled.spec, interp, pkt, LIMITS.max_msgs)
    before = prog.stats()
    got = prog.classify(pkt)
    assert got.verdict == want.verdict, (want.category, pkt.hex())
    counted = {k: v - before[k] for k, v in prog.stats().items()}   # the counters agree too
    assert counted["packets"] == 1
    assert counted["other"] == (want.category == "other")
    assert counted["overflow"] == (want.category == "overflow")
    assert counted["malformed"] == (want.category == "malformed")
    if want.category == "feed":
        assert counted["messages"] == len(want.messages)
        assert counted["no_match"] == (want.verdict == "XDP_DROP")
        assert counted["deliver"] == (want.verdict == "XDP_PASS")
        assert counted["explicit_drop"] == sum(1 for _, a in want.messages.values() if a.drop)
    out = prog.run(pkt).packet                   # classification never changes the bytes; a
    if want.category == "feed" and want.verdict == "XDP_PASS":   # delivering packet carries
        assert out[:4] == struct.pack("<I", 0xCA3005E1) and out[8:] == pkt   # its TC metadata
    else:
        assert out == pkt
    if want.category != "feed":
        return
    for i, (state, actions) in want.messages.items():
        assert i < len(got.messages)
        g_state, g_flags, g_ports = got.messages[i]
        assert g_state == state, (i, pkt.hex())
        assert contents.ports_of(g_ports) == tuple(actions.ports)
        assert bool(g_flags & 1) == actions.drop


@settings(max_examples=1000)
@given(data=st.data(), which=st.sampled_from(sorted(SPECS)))
def test_xdp_matches_the_interpreter_on_random_rules_and_packets(programs, data, which) -> None:
    sd, spec, prog = programs[which]
    rules = data.draw(rule_files(sd), label="rules")
    compiled = compile_rules(spec, rules)
    interp = PipelineInterpreter(compiled.pipeline)
    contents = install(prog, compiled)
    try:
        for _ in range(4):
            batch = data.draw(messages(sd, n=data.draw(st.integers(1, 12 if sd.mold else 1))), label="msgs")
            check_packet(prog, compiled, contents, interp, build_packet(spec, batch))
    finally:
        prog.remove(contents)


def test_itch_feed_and_malformed_input(programs) -> None:
    _, spec, prog = programs["itch"]
    compiled = compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt")
    interp = PipelineInterpreter(compiled.pipeline)
    contents = install(prog, compiled)
    rng = random.Random(5)
    stocks = ["GOOGL", "AAPL", "MSFT", "NVDA", "TSLA", "JUNK", "IBM"]
    try:
        packets = []
        for n in range(1, 13):
            batch = [message_from_text(spec, f"stock={rng.choice(stocks)} price={rng.randint(1, 3_000_000)} "
                                             f"shares={rng.randint(0, 3000)} buy_sell_indicator='{rng.choice('BS')}'")
                     for _ in range(n)]
            packets.append(build_packet(spec, batch))
        for pkt in packets:
            check_packet(prog, compiled, contents, interp, pkt)
        pkt = packets[2]                                   # 3 messages
        for cut in range(14, len(pkt)):                    # truncated at every byte (XDP sees >= 14)
            check_packet(prog, compiled, contents, interp, pkt[:cut])
        lies = [pkt[:60] + struct.pack("!H", 9) + pkt[62:],                 # count too high
                pkt[:62] + struct.pack("!H", 400) + pkt[64:],               # length too long
                pkt[:62] + struct.pack("!H", 3) + pkt[64:],                 # too short: skipped
                pkt[:60] + struct.pack("!H", 13) + pkt[62:],                # more than we classify
                pkt[:14 + 6] + b"\x20\x00" + pkt[22:],                      # IPv4 fragment
                pkt[:23] + b"\x06" + pkt[24:],                              # TCP
                pkt[:12] + b"\x81\x00\x00\x07" + pkt[12:],                  # VLAN tag
                pkt[:12] + b"\x88\xa8\x00\x01\x81\x00\x00\x07" + pkt[12:],  # QinQ
                pkt[:12] + b"\x08\x06" + pkt[14:],                          # ARP
                build_packet(spec, [], sequence=9),                         # no messages
                build_packet(spec, [message_from_text(spec, "stock=GOOGL price=99")], dst_port=22),
                pkt[:16] + b"\xff\xff" + pkt[18:],                          # IPv4 total length 0xffff
                pkt[:38] + b"\xff\xff" + pkt[40:],                          # UDP length 0xffff
                pkt[:38] + b"\x00\x04" + pkt[40:],                          # UDP length 4
                pkt[:60] + b"\xff\xff" + pkt[62:],                          # message count 65535
                pkt + bytes(30),                                            # Ethernet padding: the
                pkt[:38] + struct.pack("!H", len(pkt) - 34 - 38) + pkt[40:]]  # datagram ends first
        overflow = [build_packet(spec, [message_from_text(spec, "stock=GOOGL price=99")] * n) for n in (13, 16)]
        for p in overflow:                                  # valid batches past what XDP classifies
            check_packet(prog, compiled, contents, interp, p)
        for p in lies:
            check_packet(prog, compiled, contents, interp, p)
        prog.set_malformed_policy(True)
        assert prog.classify(lies[0]).verdict == "XDP_PASS"
        prog.set_malformed_policy(False)
        assert prog.classify(lies[0]).verdict == "XDP_DROP"
        stats = prog.stats()
        assert stats["malformed"] >= 3 and stats["other"] >= 5 and stats["explicit_drop"] >= 1
    finally:
        prog.remove(contents)


def test_stateful_counter_in_the_kernel() -> None:
    spec = load_spec(APPS / "int" / "int.p4")
    compiled = compile_rules(spec, "count(hop_latency) > 3 and hop_latency > 20000 : fwd(4)\n")
    prog = XdpProgram.load(spec, LIMITS)
    try:
        install(prog, compiled)
        pkt = build_packet(spec, [message_from_text(spec, "hop_latency=30000")])
        verdicts = [prog.classify(pkt).verdict for _ in range(6)]
        assert verdicts == ["XDP_DROP"] * 3 + ["XDP_PASS"] * 3      # the 4th in the window passes
    finally:
        prog.close()


def test_a_window_reset_never_splits_count_from_sum_on_two_cpus() -> None:
    """Both CPUs add to a 1 ms windowed counter while the windows roll over under them; snapshots
    taken under the value's lock (BPF_F_LOCK) always find sum == value x count: a reset and an
    add by another CPU never interleave (a plain-store reset lost adds and split the two)."""
    import ctypes
    import os
    import threading
    import time
    from camus.dataplane.testrun import libbpf
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    text = (APPS / "int" / "int.p4").read_text().replace("latency_window, 131072", "latency_window, 1024")
    spec = parse_spec(text, "int.p4")
    compiled = compile_rules(spec, "count(hop_latency) > 3 and hop_latency > 20000 : fwd(4)\n")
    prog = XdpProgram.load(spec, LIMITS)
    lib = libbpf()
    lib.bpf_map_lookup_elem_flags.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    try:
        install(prog, compiled)
        pkt = build_packet(spec, [message_from_text(spec, "hop_latency=30000")])
        stop = threading.Event()

        def hammer(cpu: int) -> None:
            os.sched_setaffinity(0, {cpu})               # this thread only
            while not stop.is_set():
                prog.run(pkt, 2000)

        cpus = sorted(os.sched_getaffinity(0))[:2]
        threads = [threading.Thread(target=hammer, args=(c,)) for c in cpus]
        for t in threads:
            t.start()
        fd = prog.map_fd("svars")
        key, value = ctypes.c_uint32(0), (ctypes.c_uint64 * 4)()   # lock + pad, window, count, sum
        snapshots, split, windows = 0, [], set()
        deadline = time.monotonic() + 1.5
        try:
            while time.monotonic() < deadline:
                assert lib.bpf_map_lookup_elem_flags(fd, ctypes.byref(key), value, 4) == 0   # BPF_F_LOCK
                window, count, total = value[1], value[2], value[3]
                if count:
                    snapshots += 1
                    windows.add(window)
                    if total != 30000 * count:
                        split.append((window, count, total))
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert snapshots > 100 and len(windows) > 20, (snapshots, len(windows))
        assert split == []
    finally:
        prog.close()


# Range tables come in three layouts: radix buckets with one split each, buckets holding several
# starts (a finer sub-table), and, for starts too clustered for RADIX_LEVELS, a search tree.
# Thresholds below force each one; every threshold and its neighbours are classified.
RANGE_LAYOUTS = {
    "spread": [i * 7919 % 4_000_000_000 for i in range(1, 300)],
    "clustered": [1000 + i for i in range(40)] + [2_000_000_000 + 3 * i for i in range(40)] + [5, 4_000_000_000],
    "geometric": [1 << k for k in range(32)] + [(1 << k) + 1 for k in range(1, 31)],
}


@pytest.mark.parametrize("layout", sorted(RANGE_LAYOUTS))
def test_range_layouts_at_every_boundary(programs, layout) -> None:
    from camus.compiler.backends.ebpf.contents import KIND
    _, spec, prog = programs["numbers"]
    thresholds = sorted(set(RANGE_LAYOUTS[layout]))
    rules = "\n".join(f"f2 > {t} : fwd({i % 60 + 1})" for i, t in enumerate(thresholds)) + "\n"
    compiled = compile_rules(spec, rules)
    interp = PipelineInterpreter(compiled.pipeline)
    contents = install(prog, compiled)
    kinds = {d[0] for d in contents.desc.values()}
    expect = {"spread": (KIND["radix"], False), "clustered": (KIND["radix"], True), "geometric": (KIND["range"], False)}
    kind, subs = expect[layout]
    assert kind in kinds and (len(contents.rsub) > 0) == subs, (kinds, len(contents.rsub))
    try:
        values = sorted({max(0, min(0xFFFFFFFF, t + d)) for t in thresholds + [0, 0xFFFFFFFF] for d in (-1, 0, 1)})
        for v in values:                     # this spec carries one message per packet
            check_packet(prog, compiled, contents, interp, build_packet(spec, [message_from_text(spec, f"f2={v}")]))
    finally:
        prog.remove(contents)


def test_every_n_in_the_kernel() -> None:
    """every(n) in the kernel, message by message (twelve to a packet, counted in order): the
    same deliveries as the reference filters, so exactly every tenth GOOGL message."""
    from camus.compiler.semantics.filter_eval import FilterEvaluator
    from tests.compiler.test_every import ITCH, RULES, SEQ, feed, stock_of
    spec = parse_spec(ITCH + SEQ, "itch.p4")
    compiled = compile_rules(spec, RULES)
    direct = FilterEvaluator(compiled.rules, compiled.lowered)
    prog = XdpProgram.load(spec, LIMITS)
    try:
        contents = install(prog, compiled)
        msgs = feed(spec)
        to_port1 = []
        for start in range(0, len(msgs), 12):
            batch = msgs[start:start + 12]
            got = prog.classify(build_packet(spec, batch))
            for i, m in enumerate(batch):
                ports = contents.ports_of(got.messages[i][2])
                assert sorted(ports) == sorted(direct.run(m).ports), start + i
                if 1 in ports:
                    to_port1.append(start + i)
        assert to_port1 == [i for i in range(len(msgs)) if stock_of(i) == "GOOGL"][9::10]
    finally:
        prog.remove(contents)
        prog.close()


def test_overload_bypass_over_delivers_only_and_is_counted() -> None:
    """Above the rate, packets skip filtering: their messages go to every port a rule forwards
    to (never fewer than the filters give), counted as `bypassed`; rate 0 filters all again."""
    from camus.dataplane.maps import CFG_BYPASS_PPS
    spec = load_spec(APPS / "itch" / "itch.p4")
    compiled = compile_rules(spec, "stock == GOOGL : fwd(1)\nstock == AAPL and price > 50 : fwd(2)\n"
                                   "stock == IBM : drop\n")
    interp = PipelineInterpreter(compiled.pipeline)
    prog = XdpProgram.load(spec, LIMITS)
    try:
        contents = install(prog, compiled)
        everyone = {1, 2}
        batch = [message_from_text(spec, t) for t in ("stock=GOOGL price=1", "stock=AAPL price=10", "stock=MSFT")]
        pkt = build_packet(spec, batch)
        want = [set(interp.run(m).actions.ports) for m in batch]
        prog.maps.cfg(CFG_BYPASS_PPS, 1000)           # a bucket of 10 packets, refilled at 1/ms
        before = prog.stats()["bypassed"]
        exact = bypassed = 0
        for _ in range(60):
            got = [set(contents.ports_of(m[2])) for m in prog.classify(pkt).messages]
            if got == want:
                exact += 1
            else:
                assert got == [everyone] * 3        # the cover: more, never less
                bypassed += 1
        assert exact >= 10 and bypassed >= 20, (exact, bypassed)
        assert prog.stats()["bypassed"] - before == 3 * bypassed
        prog.maps.cfg(CFG_BYPASS_PPS, 0)
        for _ in range(20):
            assert [set(contents.ports_of(m[2])) for m in prog.classify(pkt).messages] == want
    finally:
        prog.remove(contents)
        prog.close()
