"""Generic attribute encodings (EtherType 0x9001): frames of (id, value) pairs or a presence mask
decode to the attributes they carry (absent: 0), malformed frames are reported, and the
decoded messages get the same actions through the filters, the IR and the switch entries."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.registry import backend
from camus.compiler.codec import attrs
from camus.compiler.codec.packets import build_packet, decode_packet
from camus.compiler.compile import compile_rules
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.compiler.semantics.filter_eval import FilterEvaluator
from camus.compiler.semantics.interpreter import PipelineInterpreter
from tests.conftest import APPS

SPECS = {k: load_spec(APPS / "attrs" / f"{k}.p4") for k in ("pairs", "bitmask")}
RULES = (APPS / "attrs" / "rules.txt").read_text()
ETH = b"\x02" * 6 + b"\x04" * 6 + b"\x90\x01"


def random_message(spec, rng: random.Random) -> tuple[dict[str, int], list[str]]:
    d = attrs.dictionary(spec)
    values = {a.path: rng.choice([0, 3, 4, 17, 500, 900, 3500, rng.getrandbits(a.width)]) % (1 << a.width) for a in d}
    present = [a.path for a in d if rng.random() < 0.6]
    return values, present


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_frames_decode_to_what_was_encoded(kind) -> None:
    spec, rng = SPECS[kind], random.Random(5)
    for _ in range(200):
        values, present = random_message(spec, rng)
        got = decode_packet(spec, ETH + attrs.encode(spec, values, present))
        assert got.error is None
        assert got.messages[0].values == {p: (v if p in present else 0) for p, v in values.items()}


@pytest.mark.parametrize("kind, payload, error", [
    ("pairs", b"\x02\x00\x03", "without their end"),
    ("pairs", b"\x09\x00\x00\x00\x01\x00", "attribute id 9"),
    ("pairs", b"\x01\x00\x00", "runs past the frame"),
    ("pairs", b"\x05\x01" * 8 + b"\x00", "more than 7 attribute pairs"),
    ("bitmask", b"\x00\x00\x00", "truncated attribute mask"),
    ("bitmask", b"\x00\x00\x00\x80\x01", "past the 7"),
    ("bitmask", b"\x00\x00\x00\x01\x00\x00", "runs past the frame"),
])
def test_malformed_frames_are_reported(kind, payload, error) -> None:
    got = decode_packet(SPECS[kind], ETH + payload)
    assert got.feed and not got.messages and error in (got.error or "")


def test_other_ethertypes_are_not_subscription_traffic() -> None:
    spec = SPECS["pairs"]
    ipv4 = build_packet(load_spec(APPS / "itch" / "itch.p4"), [])
    got = decode_packet(spec, ipv4)
    assert not got.feed and "EtherType 0x0800" in (got.error or "")


def test_dictionary_limits_are_checked() -> None:
    text = (APPS / "attrs" / "pairs.p4").read_text().replace("bit<8>  alarm;", "bit<12> alarm;")
    with pytest.raises(CompileErrors) as info:
        parse_spec(text, "bad.p4")
    assert "attribute alarm is bit<12>" in str(info.value)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(sorted(SPECS)))
def test_filters_ir_and_switch_entries_agree_on_decoded_frames(seed, kind) -> None:
    spec, rng = SPECS[kind], random.Random(seed)
    c = compile_rules(spec, RULES)
    interp, evaluator = PipelineInterpreter(c.pipeline), FilterEvaluator(c.rules, c.lowered)
    p4 = backend("p4").engine(c)
    for _ in range(20):
        values, present = random_message(spec, rng)
        msg = decode_packet(spec, ETH + attrs.encode(spec, values, present)).messages[0].values
        ir = interp.run(msg).actions
        assert ir.names() == evaluator.run(msg).names()
        assert p4.run(msg, 0)[0].names() == ir.names()


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_scapy_layers_build_and_read_the_encodings(kind) -> None:
    from scapy.layers.l2 import Ether

    from camus.bench.attr_feeds import attribute_frames, attribute_layers
    spec = SPECS[kind]
    pairs_t, mask_t = attribute_layers(spec)
    layer = mask_t(temperature=3500, alarm=1) if kind == "bitmask" else pairs_t(pairs=[(3, 3500), (5, 1)])
    frame = bytes(Ether(src="04:04:04:04:04:04", dst="02:02:02:02:02:02") / layer)
    values = {"attrs.temperature": 3500, "attrs.alarm": 1}
    assert frame == ETH + attrs.encode(spec, values, list(values))
    back = Ether(frame)
    if kind == "bitmask":
        assert back[mask_t].mask == 0b10100 and back[mask_t].temperature == 3500
    else:
        assert back[pairs_t].pairs == [(3, 3500), (5, 1)]
    for f in attribute_frames(spec, 50, seed=2):              # the feed decodes without errors
        assert decode_packet(spec, f).error is None
