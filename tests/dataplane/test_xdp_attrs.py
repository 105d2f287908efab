"""Attribute encodings in the kernel: the XDP program parses (id, value) pairs or a presence
mask after EtherType 0x9001 in a bounded loop and classifies the attributes; on random frames
(random attributes present, some cut short or corrupted) its verdict and ports are the
reference parser's and the IR's, in both banks."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.codec import attrs
from camus.compiler.compile import compile_rules
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.dataplane.program import XdpProgram
from camus.dataplane.reference import expected_verdict
from tests.compiler.test_attrs import ETH, RULES, SPECS, random_message

pytestmark = pytest.mark.bpf
LIMITS = EbpfLimits(max_msgs=4, max_states=1 << 12, max_exact=1 << 12, max_bounds=1 << 10, max_lpm=1 << 8,
                    max_updates=64)


@pytest.fixture(scope="module")
def progs():
    loaded = {k: XdpProgram.load(spec, LIMITS) for k, spec in SPECS.items()}
    yield loaded
    for p in loaded.values():
        p.close()


def corrupt(frame: bytes, rng: random.Random) -> bytes:
    how = rng.random()
    if how < 0.1:
        return frame[:rng.randint(14, len(frame))]                 # cut short
    if how < 0.2:
        i = rng.randrange(14, len(frame))
        return frame[:i] + bytes([rng.getrandbits(8)]) + frame[i + 1:]   # one byte changed
    return frame


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(sorted(SPECS)), bank=st.sampled_from([0, 1]))
def test_attribute_frames_in_the_kernel_match_the_reference(progs, seed, kind, bank) -> None:
    spec, prog, rng = SPECS[kind], progs[kind], random.Random(seed)
    c = compile_rules(spec, RULES)
    contents = map_contents(c.pipeline, spec, LIMITS, bank=bank)
    prog.write(contents)
    interp = PipelineInterpreter(c.pipeline)
    try:
        for _ in range(25):
            values, present = random_message(spec, rng)
            frame = corrupt(ETH + attrs.encode(spec, values, present), rng)
            want = expected_verdict(spec, interp, frame, LIMITS.max_msgs)
            got = prog.classify(frame)
            assert got.verdict == want.verdict, (want.category, frame.hex())
            for i, (_, actions) in want.messages.items():
                assert contents.ports_of(got.messages[i][2]) == tuple(actions.ports), frame.hex()
    finally:
        prog.remove(contents)
