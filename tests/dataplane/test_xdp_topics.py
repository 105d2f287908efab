"""Topic fields in the kernel: the XDP program splits the topic, labels its levels through the
`labels` map and walks the tables; on random MQTT filters and topics, in both banks and with
both table strategies, every message gets the ports the MQTT semantics give (and the IR)."""
from __future__ import annotations

import ctypes

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.topics import matches
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.dataplane.maps import label_key_type
from camus.dataplane.program import XdpProgram
from camus.dataplane.reference import expected_verdict
from tests.compiler.test_topics import MQTT, TOPICS, mqtt_filters

pytestmark = pytest.mark.bpf
LIMITS = EbpfLimits(max_msgs=4, max_states=1 << 13, max_exact=1 << 13, max_bounds=1 << 12, max_lpm=1 << 10,
                    max_updates=64, max_labels=1 << 12, bv_words=64, max_bv_bitmaps=1024, max_bv_segs=256)


@pytest.fixture(scope="module")
def prog():
    p = XdpProgram.load(MQTT, LIMITS)
    yield p
    p.close()


def run_case(prog: XdpProgram, filters: list[str], topics: list[str], strategy: str, bank: int) -> None:
    rules = "\n".join(f'topic == "{f}" : fwd({i + 1})' for i, f in enumerate(filters))
    c = compile_rules(MQTT, rules, options=CompileOptions(strategy=strategy))
    contents = map_contents(c.pipeline, MQTT, LIMITS, bank=bank)
    prog.write(contents)
    interp = PipelineInterpreter(c.pipeline)
    try:
        for t in topics:
            pkt = build_packet(MQTT, [message_from_text(MQTT, f"topic={t}")])
            want = tuple(i + 1 for i, f in enumerate(filters) if matches("mqtt", f, t))
            got = prog.classify(pkt)
            assert got.verdict == expected_verdict(MQTT, interp, pkt, LIMITS.max_msgs).verdict, t
            assert contents.ports_of(got.messages[0][2]) == want, (t, rules)
    finally:
        prog.remove(contents)


@settings(max_examples=60, deadline=None)
@given(filters=st.lists(mqtt_filters(), min_size=1, max_size=8), topics=st.lists(TOPICS, min_size=1, max_size=6),
       strategy=st.sampled_from(["bdd", "bitvector"]), bank=st.sampled_from([0, 1]))
def test_topics_in_the_kernel_match_mqtt_semantics(prog, filters, topics, strategy, bank) -> None:
    run_case(prog, filters, topics, strategy, bank)


def test_long_topics_levels_past_the_labelled_ones_and_sys(prog) -> None:
    run_case(prog, ["a/+/+/+/#", "#", "a/b/a/b", "$x/#", "+/b", "ab/", "twelve-bytes/+", "+/" + "z" * 30,
                    "abcdefgh/abcdefghi"],
             ["a/b/a/b/a/b/a/b/a", "a/b/a/b", "$x", "$x/b", "a/b", "ab/", "ab", "x" * 48, "/" * 47,
              "ab/" + "a" * 45, "twelve-bytes/x", "twelve-byteZ/x", "q/" + "z" * 30, "q/" + "z" * 29,
              "abcdefgh/abcdefghi", "abcdefgh/abcdefgh", "abcdefg/abcdefghi"], "bdd", 1)


def test_removed_labels_leave_the_map(prog) -> None:
    c = compile_rules(MQTT, 'topic == "a/b" : fwd(1)\ntopic == "c/+/d" : fwd(2)\ntopic == "longer-than-8/+" : fwd(1)')
    contents = map_contents(c.pipeline, MQTT, LIMITS, bank=0)
    prog.write(contents)
    prog.remove(contents)
    assert len(contents.labels) == 1                          # the long level: something to take out
    key = label_key_type(contents.label_words)()
    assert prog.maps.lib.bpf_map_get_next_key(prog.maps.fds["labels"], None, ctypes.byref(key)) < 0
