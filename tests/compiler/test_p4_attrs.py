"""Attribute frames (EtherType 0x9001) on the switch: the v1model program that parses both
encodings into metadata (compiler/backends/p4/attrs.py), checked against the dictionary, its
entries and P4Info, golden files; TNA gets the control block with the reason."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.base import TargetOptions
from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4 import P4Backend
from camus.compiler.backends.p4.entries import check_entries, check_program_fit, p4_tables
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.runtime import p4info_message
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.backends.p4.attrs import parser_walk
from camus.compiler.codec.attrs import AttrsError, decode, dictionary, encode
from camus.compiler.compile import compile_files
from camus.compiler.language.spec_parser import load_spec
from tests.compiler.test_golden import check_golden
from tests.compiler.test_p4_program import check_entries_fit_program
from tests.conftest import APPS

SPECS = {k: APPS / "attrs" / f"{k}.p4" for k in ("pairs", "bitmask")}


def _state(text: str, name: str) -> str:
    m = re.search(rf"^    state {name} \{{\n(.*?)^    \}}", text, re.M | re.S)
    assert m, name
    return m[1]


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_the_program_reads_every_attribute_of_the_dictionary(kind: str, update_goldens: bool) -> None:
    spec = load_spec(SPECS[kind])
    text = program_text(spec)
    assert text == program_text(load_spec(SPECS[kind]))             # deterministic
    check_golden(f"{kind}_v1model.p4", text, update_goldens)
    for a in dictionary(spec):
        name, body = a.path.rpartition(".")[2], _state(text, f"camus_a{a.id}")
        assert f"bit<{a.width}> {name};" in text                      # its metadata, at its width
        if kind == "pairs":        # the id, then a state per value byte, building the value up
            assert "packet.extract(hdr.camus_pairs.next);" in body
            assert f"(_, {a.id}): camus_a{a.id};" in _state(text, "camus_pair")
            n = a.width // 8
            last = _state(text, f"camus_a{a.id}_{n - 1}")
            assert f"meta.camus_attrs.{name} = " in last and "transition camus_pair;" in last
            assert f"state camus_a{a.id}_{n} " not in text
        else:                      # present when its mask bit is set, in id order
            assert f"hdr.camus_mask.mask[{a.id - 1}:{a.id - 1}]" in _state(text, f"camus_has{a.id}")
            assert f"meta.camus_attrs.{name} = hdr.camus_a{a.id}.value;" in body
    # the frame leaves as it came: what the parser extracted, emitted in the same order
    emits = re.findall(r"packet\.emit\(hdr\.(\w+)\);", text)
    extracts = re.findall(r"packet\.extract\(hdr\.(\w+)", text)
    assert emits[0] == "ethernet" and set(extracts) == set(emits)
    if kind == "bitmask":
        assert emits == ["ethernet", "camus_mask", *(f"camus_a{a.id}" for a in dictionary(spec))]


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_attribute_entries_fit_the_program(kind: str) -> None:
    c = compile_files(str(SPECS[kind]), str(APPS / "attrs" / "rules.txt"))
    check_program_fit(c.pipeline, c.spec, "v1model")
    tables = p4_tables(c.pipeline, c.spec)
    text = program_text(c.spec)
    check_entries_fit_program(text, p4info_message(c.spec), tables)
    check_entries(tables, p4_schema(c.spec))
    assert "meta.camus_attrs.temperature : range" in text
    assert "l2_fwd" in {t.preamble.alias for t in p4info_message(c.spec).tables}


def test_tofino_gets_the_control_block_with_the_reason(tmp_path: Path) -> None:
    c = compile_files(str(SPECS["pairs"]), str(APPS / "attrs" / "rules.txt"))
    with pytest.raises(BackendError, match="Tofino's parser"):
        program_text(c.spec, P4Options(arch="tna"))
    art = P4Backend().build(c, TargetOptions(arch="tna"))
    assert "camus.p4" not in art.files and "camus_control.p4" in art.files
    assert "Tofino's parser" in art.summary
    assert "camus.p4" in P4Backend().build(c, TargetOptions()).files


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(SPECS)), present=st.lists(st.integers(1, 7), max_size=9),
       value=st.integers(0, (1 << 64) - 1), cut=st.integers(0, 80), junk=st.binary(max_size=12),
       mode=st.sampled_from(["valid", "cut", "junk", "repeat"]))
def test_the_parser_states_read_frames_as_the_reference_decoder(kind, present, value, cut, junk, mode) -> None:
    """Valid, truncated, corrupted and repeating frames: the states classify exactly the frames
    the decoder accepts, with the same values."""
    spec = load_spec(SPECS[kind])
    attrs = dictionary(spec)
    values = {a.path: value & ((1 << a.width) - 1) for a in attrs}
    data = encode(spec, values, [attrs[i - 1].path for i in present])
    if mode == "cut":
        data = data[:cut]
    elif mode == "junk":
        data = junk + data
    elif mode == "repeat" and kind == "pairs":
        data = data[:-1] * 3 + b"\0"               # the same pairs again: more than the dictionary
    try:
        want = decode(spec, data)
    except AttrsError:
        want = None
    assert parser_walk(spec, data) == want
