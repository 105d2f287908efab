"""attach sizes the diagram maps from the rule set (ebpf_tables.fitted_contents): past the
defaults only where the rules need it, with a quarter to spare per bank, and the sizes are kept
for updates (Installed.table_capacity)."""
from __future__ import annotations

import pytest

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import fitted_contents, map_contents
from camus.compiler.backends.ebpf.contents import CapacityError
from camus.compiler.compile import compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane.installed import Installed
from tests.conftest import APPS

SPEC = load_spec(APPS / "itch" / "itch.p4")
RULES = "".join(f"stock == S{i} and price > {i % 50} : fwd({1 + i % 8})\n" for i in range(600))


def test_maps_grow_only_where_the_rules_need_it_and_both_banks_fit() -> None:
    c = compile_rules(SPEC, RULES)
    small = EbpfLimits(max_states=256, max_exact=128, max_rnodes=1 << 20)
    with pytest.raises(CapacityError, match="state id: .* needed, the maps hold 128"):
        map_contents(c.pipeline, SPEC, small, bank=0)
    lim, contents = fitted_contents(c.pipeline, SPEC, small)
    assert lim.max_exact > small.max_exact and lim.max_states > small.max_states
    assert lim.max_rnodes == small.max_rnodes and lim.max_lpm == small.max_lpm     # enough already
    again = map_contents(c.pipeline, SPEC, lim, bank=0)        # the same bank-0 contents
    assert (again.desc, again.xslots, again.leaf, again.root) == (contents.desc, contents.xslots,
                                                                   contents.leaf, contents.root)
    other = map_contents(c.pipeline, SPEC, lim, bank=1)        # and the other bank fits beside it
    assert set(other.xslots).isdisjoint(contents.xslots) and set(other.desc).isdisjoint(contents.desc)
    # a quarter to spare: the half holds 1.25x what this rule set takes
    assert lim.max_exact // 2 >= contents.xslot_count * 5 // 4
    assert fitted_contents(c.pipeline, SPEC, EbpfLimits())[0] == EbpfLimits()   # defaults suffice: unchanged


def test_the_sizes_are_kept_for_updates() -> None:
    inst = Installed("eth0", "native", "s", "r", 0, 1, [], {}, table_capacity={"max_exact": 1 << 21},
                     bv_capacity=[128, 4096, 2048])
    lim = inst.limits()
    assert lim.max_exact == 1 << 21 and lim.bv_words == 128 and lim.max_states == EbpfLimits().max_states
    assert Installed("eth0", "native", "s", "r", 0, 1, [], {}).limits() == EbpfLimits()
