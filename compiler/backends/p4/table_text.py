"""P4 back end: the schema's tables as P4 text (a declaration, an apply with its fallbacks on a
miss) and the egress port filters' block, shared by the ingress tables and the egress control."""
from __future__ import annotations

from ..emit import Emitter
from .schema import PF_ACCEPT, PF_KEEP, PF_PORT, PF_SET, P4Schema, TableDecl


def declare_table(decl: Emitter, t: TableDecl) -> None:
    """One table of the schema as a P4 declaration."""
    with decl.block(f"table {t.name}"):
        keys = [f'{k.expr} : {k.match} @name("{k.name}");' for k in t.keys]
        if len(keys) == 1:
            decl(f"key = {{ {keys[0]} }}")
        elif keys:
            with decl.block("key ="):
                for k in keys:
                    decl(k)
        decl(f"actions = {{ {' '.join(a + ';' for a in t.actions)} }}")
        decl(f"default_action = {t.default}")
        decl(f"size = {t.size};")


def apply_table(seq: Emitter, t: TableDecl, schema: P4Schema) -> None:
    """Apply a table; its fallback (and the fallback's own) only on a miss."""
    fallback = schema.table(t.fallback) if t.fallback else None
    if fallback is None:
        seq(f"{t.name}.apply();")
        return
    with seq.block(f"if (!{t.name}.apply().hit)"):
        apply_table(seq, fallback, schema)


def egress_filter_blocks(schema: P4Schema) -> dict[str, str]:
    """The egress port filters (schema.egress): declarations, and the statements that run them
    on a delivered copy before anything else in egress (a dropped copy is not counted)."""
    if not schema.egress:
        return {"EGRESS_FILTER_DECLS": "    // no header field egress can read: no port filters",
                "EGRESS_FILTER": "        // no port filters"}
    decl, seq = Emitter(), Emitter()
    decl.depth, seq.depth = 1, 2
    state_bits = schema.actions[PF_SET].params[0][1]
    decl("// port filters (structure/port_filters.py): a port's own rules, run on its copies")
    decl(f"action {PF_SET}(bit<{state_bits}> next) {{ meta.camus.pf_state = next; }}")
    decl(f"action {PF_KEEP}() {{ }}")
    for t in schema.egress:
        declare_table(decl, t)
    if schema.arch == "v1model":
        copy = "meta.camus.deliver == 1 && standard_metadata.instance_type != PKT_INSTANCE_TYPE_INGRESS_CLONE"
        drop = "mark_to_drop(standard_metadata);"
    else:
        copy = "meta.camus.recirc == 0 && meta.camus.classify == 1"
        drop = "eg_dprsr_md.drop_ctl = 1;"
    with seq.block(f"if ({copy})"):
        seq("// a port with a filter keeps its copy only when its own rules select the message")
        with seq.block(f"if ({PF_PORT}.apply().hit)"):
            for t in schema.egress_order():
                if t.name != PF_ACCEPT:
                    apply_table(seq, t, schema)
            with seq.block(f"if (!{PF_ACCEPT}.apply().hit)"):
                seq(drop)
                seq("return;")
    return {"EGRESS_FILTER_DECLS": decl.text().rstrip("\n"), "EGRESS_FILTER": seq.text().rstrip("\n")}
