"""The eBPF back end's map contents without root: goldens of what `attach` writes for the
shipped ITCH example (diagram) and a small 10-attribute set (bit vectors), bank 0 and the same
set moved to bank 1 (every state id, slot, bitmap and segment shifted consistently)."""
from __future__ import annotations

from camus.bench.workloads import siena_rules, siena_schema
from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.backends.ebpf.contents import STATE_FINAL, STATE_MASK, MapContents
from camus.compiler.compile import compile_files, compile_rules
from camus.compiler.language.spec_parser import parse_spec
from tests.compiler.test_golden import check_golden
from tests.conftest import APPS

LIMITS = EbpfLimits(max_states=1 << 12, max_exact=1 << 12, max_bounds=1 << 10, max_rnodes=1 << 12,
                    max_rsub=1 << 8, max_lpm=1 << 8, max_updates=64, bv_words=16, max_bv_bitmaps=512,
                    max_bv_segs=64)


def dump(c: MapContents) -> str:
    """Every map's entries in key order, one per line."""
    lines = [f"root {c.root:#x}  ports {c.ports}"]
    lines += [f"desc {s:#x} {d}" for s, d in sorted(c.desc.items())]
    lines += [f"xslot {i} {v}" for i, v in sorted(c.xslots.items())]
    lines += [f"bound {c.bounds_base + i} {b}" for i, b in enumerate(c.bounds)]
    lines += [f"rnode {c.rnodes_base + i} {r}" for i, r in enumerate(c.rnodes)]
    lines += [f"rsub {c.rsub_base + i} {r}" for i, r in enumerate(c.rsub)]
    lines += [f"lpm {k} {v}" for k, v in sorted(c.lpm.items())]
    lines += [f"leaf {s:#x} {a}" for s, a in sorted(c.leaf.items())]
    lines += [f"bv_bits {k} {' '.join(f'{w:x}' for w in ws)}" for k, ws in sorted(c.bv_bits.items())]
    for k, (tops, rest, words, first, leaves) in enumerate(c.bv_planes):
        lines += [f"bv_plane {c.bv_segs_base}/{k} tops {tops:x} rest {rest:x} words {first}+{words}"]
        lines += [f"bv_pleaf {c.bv_segs_base}/{k}/{g} {p}" for g, p in enumerate(leaves)]
    lines += [f"bv_seg {c.bv_segs_base}/{j} {s}" for j, s in enumerate(c.bv_segs)]
    return "\n".join(lines) + "\n"


def _siena():
    schema = siena_schema(10)
    spec = parse_spec(schema.spec_text(), "siena.p4")
    return compile_rules(spec, "\n".join(siena_rules(30, schema, seed=2)))


def test_itch_map_contents_golden(update_goldens: bool) -> None:
    c = compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt")
    check_golden("itch_maps.txt", dump(map_contents(c.pipeline, c.spec, LIMITS, bank=0)), update_goldens)


def test_bitvector_map_contents_golden(update_goldens: bool) -> None:
    c = _siena()
    assert c.pipeline.bitvector is not None
    check_golden("siena_bv_maps.txt", dump(map_contents(c.pipeline, c.spec, LIMITS, bank=0)), update_goldens)


def test_bank_one_is_bank_zero_shifted() -> None:
    for c in (compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt"), _siena()):
        a, b = map_contents(c.pipeline, c.spec, LIMITS, bank=0), map_contents(c.pipeline, c.spec, LIMITS, bank=1)
        ds = LIMITS.max_states // 2

        def st(s: int) -> int:
            return (s & STATE_FINAL) | ((s & STATE_MASK) + ds if s & STATE_MASK else 0)
        assert b.root == st(a.root)
        assert set(b.desc) == {st(s) for s in a.desc} and set(b.leaf) == {st(s) for s in a.leaf}
        assert b.bv_bits == {k + LIMITS.max_bv_bitmaps // 2: w for k, w in a.bv_bits.items()}
        assert [s[2] for s in b.bv_segs] == [st(s[2]) for s in a.bv_segs] and b.bv_segs_base == 1
        assert [[x[2] for x in p[4]] for p in b.bv_planes] == [[st(x[2]) for x in p[4]] for p in a.bv_planes]
        assert [p[:4] for p in b.bv_planes] == [p[:4] for p in a.bv_planes]
        assert len(b.rnodes) == len(a.rnodes) and b.rnodes_base == LIMITS.max_rnodes // 2
