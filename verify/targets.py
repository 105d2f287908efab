"""The tables of a compile's outputs, as the checker's machines: the IR, the P4 entries (built
in-process, or read from a directory the P4 back end wrote: P4Runtime text with its P4Info), and
what a running switch holds, read back over P4Runtime."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from camus.compiler.language.spec import Spec

from .machines import Machine, ir_machine, p4_machine
from .rules import RuleSet, Undecidable, read_rules


def written_xdp(c: Any) -> tuple[Any, Callable[[], Machine]]:
    """The XDP map values `attach` would write for compile `c` (sized as it sizes them), kept in
    memory byte for byte, and a reader that reads them as the XDP program walks them (afresh on
    each call: a test may change a value between)."""
    from camus.compiler.backends.ebpf.program import RADIX_LEVELS
    from camus.compiler.backends.ebpf.tables import sized_contents
    from camus.compiler.backends.emit import BackendError
    from .xdp_maps import live_machine, written_maps
    try:
        limits, contents = sized_contents(c.pipeline, c.spec)
    except BackendError as exc:
        raise Undecidable(f"the eBPF back end refuses these tables: {exc}") from None
    maps = written_maps(contents)
    return maps, lambda: live_machine(c.spec, maps, contents.root, list(contents.ports), limits.range_levels,
                                      RADIX_LEVELS, max_states=limits.max_states)


def compiled_machine(c: Any, target: str) -> Machine:
    """A compile's tables for `target` (ir | ebpf | p4), as the back end produces them (ebpf: the
    map values `attach` would write, sized as it sizes them, read as the XDP program walks them)."""
    if target == "ir":
        return ir_machine(c.spec, c.pipeline)
    if target == "ebpf":
        return written_xdp(c)[1]()
    from camus.compiler.backends.p4.entries import p4_tables
    from camus.compiler.backends.p4.schema import p4_schema
    return p4_machine(c.spec, p4_tables(c.pipeline, c.spec), p4_schema(c.spec))


SWITCH_READ_TIMEOUT_S = 10.0


def switch_p4_machine(spec: Spec, address: str, device_id: int = 1, tls: Any = None,
                      tls_name: str | None = None) -> Machine:
    """What the switch at `address` holds (every table entry, the tables' default entries, the
    multicast groups), read over P4Runtime under the names of its own P4Info. The reader asks
    with election id 0, which P4Runtime keeps for clients that never become primary: a
    controller writing to the switch keeps its role. `tls`: the CA that signed the switch and,
    for a switch that takes only known clients, our certificate (controller/tls.py TlsFiles)."""
    from camus.compiler.backends.emit import BackendError
    from camus.compiler.backends.p4.runtime import tables_from_entities
    from camus.compiler.backends.p4.schema import p4_schema
    from camus.controller.p4rt_client import P4RuntimeClient, P4RuntimeError
    try:
        client = P4RuntimeClient(address, device_id, election_id=0, timeout=SWITCH_READ_TIMEOUT_S, primary=False,
                                 tls=tls, tls_name=tls_name)
    except P4RuntimeError as exc:
        raise Undecidable(f"cannot read the switch: {exc}") from None
    try:
        tables = tables_from_entities(client.names(), spec, client.read())
    except (P4RuntimeError, BackendError) as exc:
        raise Undecidable(f"cannot read the switch's entries: {exc}") from None
    finally:
        client.close()
    return p4_machine(spec, tables, p4_schema(spec))


WRITTEN_FORMS = {"entries.txtpb": "P4Runtime", "entries.cli": "simple_switch_CLI", "entries.bfrt.py": "bfrt_python"}


def written_p4_forms(spec: Spec, directory: Path) -> dict[str, Machine]:
    """Every form of the entries the directory holds (P4Runtime text with its P4Info, the
    simple_switch_CLI commands, the bfrt_python script), each read as its tool would take it."""
    from .entry_files import tables_from_bfrt, tables_from_cli
    from camus.compiler.backends.p4.schema import P4Options, p4_schema
    out: dict[str, Machine] = {}
    for name, form in WRITTEN_FORMS.items():
        path = directory / name
        if not path.exists():
            continue
        if name == "entries.txtpb":
            out[form] = written_p4_machine(spec, directory)
            continue
        arch = "v1model" if name == "entries.cli" else "tna"
        try:
            text = path.read_text()
        except OSError as exc:
            raise Undecidable(f"cannot read {path}: {exc}") from None
        tables = tables_from_cli(spec, text) if arch == "v1model" else tables_from_bfrt(spec, text)
        out[form] = p4_machine(spec, tables, p4_schema(spec, P4Options(arch=arch)))
    if not out:
        raise Undecidable(f"no P4 entries in {directory} ({', '.join(WRITTEN_FORMS)})")
    return out


def written_p4_machine(spec: Spec, directory: Path) -> Machine:
    """The P4 entries a compile wrote (entries.txtpb with p4info.txtpb), as a switch loads them."""
    from camus.compiler.backends.p4.runtime import Names, p4info_pb2, p4runtime_pb2, tables_from_entities, text_format
    from camus.compiler.backends.p4.schema import p4_schema
    try:
        info = text_format.Parse((directory / "p4info.txtpb").read_text(), p4info_pb2.P4Info())
        req = text_format.Parse((directory / "entries.txtpb").read_text(), p4runtime_pb2.WriteRequest())
    except (OSError, text_format.ParseError) as exc:
        raise Undecidable(f"cannot read the P4 entries in {directory}: {exc}") from None
    tables = tables_from_entities(Names(info), spec, [u.entity for u in req.updates])
    return p4_machine(spec, tables, p4_schema(spec))


def attached_machine(unit: str) -> tuple[Spec, RuleSet, tuple[str, str, int], Machine]:
    """What the unit attached as `unit` (`eth0`, `eth0@dns`) serves, read from its pinned maps
    under the unit's lock (a command changing it is waited for): its spec, the rules the state
    file says are live (with the counters it attributes each leaf's hits to), the spec's and the
    rule file's paths and the live rules' count, and the tables from the live root on."""
    from camus.compiler.backends.ebpf.program import RADIX_LEVELS
    from camus.compiler.language.spec_parser import load_spec
    from camus.dataplane.installed import load_installed, unit_lock, valid_unit
    from camus.dataplane.maps import CFG_ROOT, MapError, MapSet
    from camus.dataplane.program import DataplaneError
    from .xdp_maps import live_machine
    try:
        unit = valid_unit(unit)
        with unit_lock(unit, wait=True) as got:
            if not got:
                raise Undecidable(f"{unit} is held by another process writing its maps")
            inst = load_installed(unit)
            if inst.pending:
                raise Undecidable(f"an update of {unit} is in flight (run `camus-xdp status {inst.iface}` to finish it)")
            bits = inst.keys.get("ports", inst.port_bits)
            if bits is None:
                raise Undecidable(f"{unit}'s state file predates port numbering in it: update the unit once")
            spec = load_spec(inst.spec)
            text = "".join(line + "\n" for line in inst.rule_lines)
            rules = _counted(read_rules(spec, text, f"the rules live on {unit}"), text, inst.counted)
            leaf_rules = {int(s): list(ks) for s, ks in inst.leaf_rules.items()}
            maps = MapSet.from_pins(inst.pins)
            try:
                limits = inst.limits()
                m = live_machine(spec, maps, maps.cfg(CFG_ROOT), list(bits), limits.range_levels, RADIX_LEVELS,
                                 leaf_rules, limits.max_states)
            finally:
                maps.close()
    except (DataplaneError, MapError, OSError) as exc:
        raise Undecidable(f"cannot read {unit}: {exc}") from None
    return spec, rules, (inst.spec, inst.rules, len(inst.rule_lines)), m


def _counted(rules: RuleSet, text: str, counted: list[str]) -> RuleSet:
    """Rule i adds to counter k when its text (as the data plane writes rule texts) is the state
    file's counted[k]: the attribution `stats` and the metrics report hits by."""
    from camus.compiler.language.rules_parser import parse_rules
    from camus.dataplane.counting import texts_of
    by_text: dict[str, list[int]] = {}
    for k, t in enumerate(counted):
        by_text.setdefault(t, []).append(k)
    texts = texts_of(text, parse_rules(text)[0])
    return rules.with_counters({i: by_text[t] for i, t in enumerate(texts) if t in by_text})
