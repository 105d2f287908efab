"""The one layout shared by the kernel and user space: bpf/camus_xdp.h compiled by the C
compiler, against the ctypes mirrors and constants on the Python side (sizes, every field's
offset, the shared #defines). No root needed: it compiles and runs a small C program."""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from camus.compiler.backends.ebpf import bitvector as ebpf_bitvector, contents as ebpf_contents
from camus.compiler.structure import bv_layout as bitvector
from camus.dataplane import fanout, maps
from tests.conftest import ROOT

FIXED = [maps.Desc, maps.Slot, maps.Bound, maps.RNode, maps.RSub, maps.LpmKey, maps.PortCfg,
         maps.SvarCfg, maps.BvCol, maps.BvRun, maps.BvPortRun]


def structs(words: int) -> list:
    """Every mirrored struct, those holding a port set as a program with `words` words lays them out."""
    ps = maps.port_structs(words)
    return FIXED + [ps.Leaf, ps.BvSeg, ps.BvPrefixLeaf, ps.BvPlane, ps.Bypass, ps.Result, ps.FanCfg, ps.PortSet]


CONSTANTS = {
    "CAMUS_MAX_PROBE": ebpf_contents.MAX_PROBE,
    "CAMUS_FANOUT": ebpf_contents.FANOUT, "CAMUS_RADIX_SUB": ebpf_contents.RADIX_SUB,
    "CAMUS_STATE_FINAL": ebpf_contents.STATE_FINAL, "CAMUS_STATE_MASK": ebpf_contents.STATE_MASK,
    "CAMUS_KIND_EXACT": ebpf_contents.KIND["exact"], "CAMUS_KIND_RANGE": ebpf_contents.KIND["range"],
    "CAMUS_KIND_LPM": ebpf_contents.KIND["lpm"], "CAMUS_KIND_RADIX": ebpf_contents.KIND["radix"],
    "CAMUS_KIND_BV": ebpf_bitvector.KIND_BV, "CAMUS_KIND_DIRECT": ebpf_contents.KIND["direct"],
    "CAMUS_STATE_BV": ebpf_bitvector.STATE_BV,
    "CAMUS_LEAF_COUNTED": ebpf_bitvector.LEAF_COUNTED, "CAMUS_LEAF_WIDE": ebpf_bitvector.LEAF_WIDE,
    "CAMUS_SEG_PLANE_SHIFT": ebpf_bitvector.SEG_PLANE_SHIFT, "CAMUS_DEBRUIJN": maps.DEBRUIJN,
    "CAMUS_ONE_WORD_SHIFT": ebpf_bitvector.ONE_WORD_SHIFT,
    "CAMUS_BV_PLANES": bitvector.MAX_PLANES, "CAMUS_BV_PLANE_LEAVES": bitvector.PLANE_LEAVES,
    "CAMUS_BV_PLANE_WORDS": bitvector.PLANE_WORDS,
    "CAMUS_CFG_ROOT": maps.CFG_ROOT, "CAMUS_CFG_MALFORMED": maps.CFG_MALFORMED, "CAMUS_CFG_RECORD": maps.CFG_RECORD,
    "CAMUS_CFG_NSVARS": maps.CFG_NSVARS, "CAMUS_CFG_REDIRECT": maps.CFG_REDIRECT, "CAMUS_CFG_TC": maps.CFG_TC,
    **{f"CAMUS_STAT_{n}": i for i, n in enumerate(("PACKETS", "OTHER", "MALFORMED", "MESSAGES", "NO_MATCH",
                                                   "EXPLICIT", "DELIVER", "LOCAL", "REDIRECT", "OVERFLOW"))},
    "CAMUS_STAT_BROADCAST": maps.STAT_NAMES.index("broadcast"), "CAMUS_STAT_MAX": len(maps.STAT_NAMES),
    "CAMUS_MAX_FAN": fanout.MAX_FAN, "CAMUS_MAX_FAN_GROUPS": fanout.MAX_GROUPS,
    "CAMUS_STAT_BROADCAST_ALL": maps.STAT_NAMES.index("broadcast_all"),
    "CAMUS_STAT_CROSS_CPU": maps.STAT_NAMES.index("cross_cpu"),
}


def _c_layout(tmp_path, words: int) -> dict[str, int]:
    cc = shutil.which("cc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <linux/types.h>", "#include <linux/bpf.h>",
             '#include "camus_xdp.h"', "int main(void) {"]
    for s in structs(words):
        lines.append(f'printf("{s.c_struct} %zu\\n", sizeof(struct {s.c_struct}));')
        for name, _ in s._fields_:
            lines.append(f'printf("{s.c_struct}.{name} %zu\\n", offsetof(struct {s.c_struct}, {name}));')
    for name in [*CONSTANTS, "CAMUS_PORT_WORDS"]:
        lines.append(f'printf("{name} %llu\\n", (unsigned long long)({name}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    defines = [] if words == ebpf_contents.PORT_WORDS else [f"-DCAMUS_PORT_WORDS={words}"]   # as program_text defines it
    built = subprocess.run([cc, *defines, "-I", str(ROOT / "bpf"), "-o", str(exe), str(src)], capture_output=True,
                           text=True)
    if built.returncode and ("linux/types.h" in built.stderr or "linux/bpf.h" in built.stderr):
        pytest.skip("no kernel UAPI headers (linux-libc-dev)")
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("words", [4, 16, 64])     # 256 ports (the usual program), 1,024, 4,096
def test_ctypes_mirrors_and_constants_match_the_header(tmp_path, words) -> None:
    c = _c_layout(tmp_path, words)
    assert c["CAMUS_PORT_WORDS"] == words
    for s in structs(words):
        assert ctypes.sizeof(s) == c[s.c_struct], s.c_struct
        for name, _ in s._fields_:
            assert getattr(s, name).offset == c[f"{s.c_struct}.{name}"], f"{s.c_struct}.{name}"
    for name, value in CONSTANTS.items():
        assert value == c[name], name
