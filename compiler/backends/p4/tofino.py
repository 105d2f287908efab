"""What a Tofino pipe holds, each figure next to its public source, and one function per
resource that a reader can check by hand on a three-rule example.

No P4 compiler for Tofino runs here, so this model is the judge of whether entries fit. Every
capacity below is a constant of Intel's open-sourced Tofino compiler (bf-p4c, published in the
p4lang organisation) or of the Tofino Native Architecture's public P4 headers; where a figure is
our modelling choice rather than a published constant, the comment says so.

Sources (paths inside the p4lang/bf-p4c repository unless said otherwise):
  [stages]  bf-p4c/device.h: TofinoDevice::getNumStages() returns 12 (Tofino-1);
            JBayUDevice ("Tofino2U") returns 20.
  [sram]    bf-p4c/mau/tofino/memories.h: SRAM_ROWS = 8, SRAM_COLUMNS = 10 (80 RAMs a stage),
            SRAM_DEPTH = 1024 words; bf-p4c/mau/table_format.h: SINGLE_RAM_BITS = 128 (a word),
            VERSION_BITS = 4 (each exact entry's version/valid nibble), RAM_GHOST_BITS = 10 (key
            bits that select the RAM line through the hash and are not stored).
  [alloc]   bf-p4c/mau/memories.cpp: memories go to a table whole. Memories::mems_needed(entries,
            depth, per_mem_row) = ceil(entries / (depth * per_mem_row)) RAMs; Memories::analyze_tables
            counts an exact table's RAMs as ceil(words / 1024) and a ternary table's TCAMs as
            ceil(entries / 512) deep times its width in TCAMs. A table of 3 words takes a RAM, one
            of 600 rows two TCAMs deep. The entries counted are the table's declared `size`
            (bf-p4c's table layout takes the P4 table's size property as its entries), so a
            declared table takes memories even with no entry. Budgets hold against these.
  [pack]    bf-p4c/mau/table_layout.cpp, LayoutChoices::setup_exact_match: an exact table's
            layout packs n entries (1..9: bf-p4c/device.h TofinoDevice getSramMinPackEntries 1,
            getSramMaxPackEntries 9) into a wide word of w RAMs, w the largest of: the entries'
            bits over 128, their key bytes over 16 (table_format.h SINGLE_RAM_BYTES), their
            overhead (action data) bits over 64 (OVERHEAD_BITS), n over 5 (getSramMaxPackEntriesPerRow);
            w at most 8 (Memories::SRAM_ROWS). A 106-bit entry: 6 in 5 RAMs (1.2 a word), not one.
  [tcam]    bf-p4c/mau/tofino/memories.h: TCAM_ROWS = 12, TCAM_COLUMNS = 2 (24 TCAMs a stage),
            TCAM_DEPTH = 512 rows; the assembler's ternary tables are 44 bits wide
            (bf-asm TernaryMatchTable::pass1, `input_xbar->pass1(stage->tcam_ixbar, 44)`).
  [range]   barefootnetworks/Open-Tofino p4-examples/p4_16_programs/tna_range_match/README.md:
            "the implementation of range match consumes multiple TCAM entries per range entry".
            How many: Tofino's TCAM matches a range key in DirtCAM mode, where a 4-bit nibble's
            16 values are decoded one-hot, so one row matches *any set* of values of a nibble
            (bf-p4c's input crossbar sets up "dirtcam bits" for range keys, mau/input_xbar.cpp).
            Our model of that: a range costs the rows of its base-16 prefix decomposition with
            the sibling blocks of one level merged into one row (at most 2n-1 rows for n nibbles,
            where binary prefixes take up to 2w-2), and a range nibble takes 8 TCAM bits of width
            instead of 4 (16 cells of two bits): the width of a range key doubles.
  [pre]     Open-Tofino's tna.p4: `typedef bit<16> MulticastGroupId_t` (at most 65,535 groups; 0 is
            "no group"). A group is a list of level-1 nodes, each with a replication id and a
            port bitmap (bfrt's pre.node: DEV_PORT is a list of ports): ports cost bits of one
            node, not one member each; our groups use one node each (entries.bfrt.py). The node
            memory's size is not public: nodes are reported, and limited only by a budget file.
  [deps]    Bosshart et al., "Forwarding Metamorphosis", SIGCOMM 2013, section 2.3: a table
            that matches on a field an earlier table's action writes (a match dependency) must
            sit in a later stage; a table applied only on another's miss (a successor
            dependency) may share its stage, its result predicated on the other's miss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

# [sram]
SRAM_RAMS_PER_STAGE = 8 * 10
SRAM_DEPTH = 1024
SRAM_WORD_BITS = 128
VERSION_BITS = 4
RAM_GHOST_BITS = 10
# [tcam]
TCAM_BLOCKS_PER_STAGE = 12 * 2
TCAM_DEPTH = 512
TCAM_BLOCK_BITS = 44
RANGE_NIBBLE_BITS = 4               # [range]: DirtCAM decodes 4 bits at a time
RANGE_WIDTH_FACTOR = 2              # [range]: a decoded nibble takes 8 TCAM bits
# [pre]
MULTICAST_GROUP_IDS = (1 << 16) - 1


@dataclass(frozen=True)
class Device:
    """One pipe of a Tofino generation: what it holds, from the sources above."""
    name: str
    stages: int                       # [stages]

    @property
    def sram_words(self) -> int:
        return self.stages * SRAM_RAMS_PER_STAGE * SRAM_DEPTH

    @property
    def tcam_block_rows(self) -> int:
        return self.stages * TCAM_BLOCKS_PER_STAGE * TCAM_DEPTH


TOFINO1 = Device("tofino", 12)
TOFINO2 = Device("tofino2", 20)
DEVICES = {d.name: d for d in (TOFINO1, TOFINO2)}


# -- SRAM: exact entries ---------------------------------------------------------------------

def exact_entry_bits(key_bits: int, action_bits: int) -> int:
    """Bits one exact entry occupies in a RAM word: its key less the bits the hash uses to pick
    the line (not stored), its action data, its version nibble. state(32) + price(32) -> next
    state(32): 54 + 32 + 4 = 90 bits."""
    return max(0, key_bits - RAM_GHOST_BITS) + action_bits + VERSION_BITS


SRAM_WORD_BYTES = 16                # [pack]
OVERHEAD_BITS_PER_RAM = 64
PACK_MAX_ENTRIES = 9
PACK_MAX_PER_RAM = 5
WIDE_MAX_RAMS = 8


def exact_layouts(key_bits: int, action_bits: int) -> list[tuple[int, int]]:
    """The (entries, RAMs) wide-word layouts an exact table may take ([pack])."""
    bits = exact_entry_bits(key_bits, action_bits)
    key_bytes = -(-key_bits // 8)
    out = []
    for n in range(1, PACK_MAX_ENTRIES + 1):
        width = max(-(-n * bits // SRAM_WORD_BITS), -(-n * key_bytes // SRAM_WORD_BYTES),
                    -(-n * action_bits // OVERHEAD_BITS_PER_RAM), -(-n // PACK_MAX_PER_RAM))
        if width > WIDE_MAX_RAMS:
            break
        out.append((n, width))
    return out


def exact_words(entries: int, key_bits: int, action_bits: int) -> int:
    """RAM words for `entries` exact entries: the layout that takes fewest ([pack]: 42-bit entries
    three to a word; 90 bits seven in five words; 106 bits six in five), an entry too wide for
    any layout a word per 128 bits."""
    if entries <= 0:
        return 0
    layouts = exact_layouts(key_bits, action_bits)
    if not layouts:
        return entries * -(-exact_entry_bits(key_bits, action_bits) // SRAM_WORD_BITS)
    return min(-(-entries // n) * width for n, width in layouts)


def rams(words: int) -> int:
    """Whole RAMs for `words` words of one table ([alloc])."""
    return -(-words // SRAM_DEPTH)


def tcams(rows: int, wide: int) -> int:
    """Whole TCAMs for `rows` rows `wide` blocks wide, of one table ([alloc])."""
    return -(-rows // TCAM_DEPTH) * wide


def ternary_action_words(rows: int, action_bits: int) -> int:
    """RAM words holding the action data of `rows` TCAM rows (each row's own, packed to words)."""
    if rows <= 0:
        return 0
    per_word = max(1, SRAM_WORD_BITS // max(1, action_bits))
    return -(-rows // per_word)


# -- TCAM: ternary, LPM and range rows -------------------------------------------------------

def range_row_blocks(lo: int, hi: int, bits: int) -> list[tuple[int, int, int]]:
    """The TCAM rows of the range [lo, hi] over a `bits`-wide key ([range]), each as (first value,
    block size 16^k, blocks): blocks of 16^k values aligned on 16^k, consecutive blocks under one
    parent block merged into one row (one row matches any set of values of one nibble)."""
    top = (1 << bits) - 1
    out = []
    while lo <= hi:
        size = 1
        while size <= top and lo % (size << RANGE_NIBBLE_BITS) == 0 and lo + (size << RANGE_NIBBLE_BITS) - 1 <= hi:
            size <<= RANGE_NIBBLE_BITS
        parent = size << RANGE_NIBBLE_BITS
        end = min(hi, (lo // parent + 1) * parent - 1)
        count = (end - lo + 1) // size
        out.append((lo, size, count))
        lo += count * size
    return out


def range_rows(lo: int, hi: int, bits: int) -> int:
    """How many TCAM rows [lo, hi] takes: [0, max]: 1; [5, 5]: 1; [0x10, 0x2f]: 1 (nibble 1 in
    {1, 2}); [15, 16]: 2; [1, 1000] over 32 bits: 5 (binary prefixes: 15)."""
    return len(range_row_blocks(lo, hi, bits))


def tcam_blocks_wide(key_bits: int, range_bits: int) -> int:
    """TCAM blocks side by side for one row: 44 bits each; a range key's bits count double."""
    return max(1, -(-(key_bits + (RANGE_WIDTH_FACTOR - 1) * range_bits) // TCAM_BLOCK_BITS))


# -- the replication engine -----------------------------------------------------------------

def replication(groups: Iterable[tuple[object, ...]]) -> dict[str, int]:
    """Multicast groups and level-1 nodes ([pre]): one node per group, its ports a bitmap;
    `copies` (one per port of a group) is what the engine makes, not what it stores."""
    n = copies = 0
    for ports in groups:
        n += 1
        copies += len(ports)
    return {"multicast_groups": n, "multicast_nodes": n, "multicast_copies": copies}


# -- stages ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageTable:
    """What the stage count needs to know of a table: the fields its keys read, the fields its
    actions write, and the table whose miss it runs on (None: it always runs)."""
    name: str
    reads: frozenset[str]
    writes: frozenset[str]
    guard: str | None = None


def stages(tables: list[StageTable]) -> dict[str, int]:
    """Each table's stage ([deps]), tables in the order they apply: one stage after the latest
    earlier table that writes a field it reads (a match dependency); a table run on its guard's
    miss shares the guard's stage (a successor dependency: the guard wrote nothing then)."""
    at: dict[str, int] = {}
    guard_of = {t.name: t.guard for t in tables}
    for i, t in enumerate(tables):
        chain = set()
        g = t.guard
        while g is not None:
            chain.add(g)
            g = guard_of.get(g)
        stage = max((at[t.guard],) if t.guard is not None and t.guard in at else (0,))
        for u in tables[:i]:
            if u.name not in chain and u.writes & t.reads:
                stage = max(stage, at[u.name] + 1)
        at[t.name] = stage
    return at
