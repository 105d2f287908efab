"""P4 back end in Camus's mode: the subscription tables as a `control Camus(...)` block for a
user's own P4 program, for specs that name their fields by pragma only (no header stack to
build a whole program from) and, beside the whole program, for specs that have one.

The block is the whole program's classification part and nothing else: the same tables from
the same schema (`p4_schema`), the same apply sequence and the same entries, with the walk's
state in a `camus_meta_t` the user's program owns. Parsing, deparsing and what to do with a
delivered or dropped message stay the user's; the templates' header comments show the three
lines that wire it in.
"""
from __future__ import annotations


from ...language.spec import Role, Spec
from ..emit import BackendError, fill_template
from .program import table_blocks
from .attrs import attrs_meta_type
from .schema import ATTRS_META, ARCHS, P4Options, check_metadata_arch, is_attrs, meta_slots, p4_schema
from .ila import META as ILA_META
from .ila import ila_rewrites
from .ila import metadata_type as ila_metadata_type
from .layout import meta_name
from .topics import metadata_type


def control_text(spec: Spec, opts: P4Options = P4Options(), camus_compat: bool = False) -> str:
    """`camus_control.p4` for `spec` on `opts.arch` (deterministic). `camus_compat` (v1model):
    the file a program that includes the Camus compiler's output expects instead, `control
    Camus(inout headers hdr, inout standard_metadata_t standard_metadata)` with its walk inside."""
    if opts.arch not in ARCHS:
        raise BackendError(f"unknown P4 architecture {opts.arch!r} (one of {', '.join(ARCHS)})")
    check_metadata_arch(spec, opts.arch)
    schema = p4_schema(spec, opts)
    decl, seq = table_blocks(spec, schema)
    # The whole program keeps the walk in meta.camus; the block gets it as its `camus` parameter.
    decl, seq = decl.replace("meta.camus.", "camus."), seq.replace("meta.camus.", "camus.")
    types, members = [], []
    for t in spec.topics.values():          # topic and DNS name variables: camus.<field>.depth, ...
        name = meta_name(t.path)
        types.append(metadata_type(t, scratch=False))
        members.append(f"    {name}_t {name[len('camus_'):]};   // {t.path}: filled by your parser")
        decl, seq = (x.replace(f"meta.{name}.", f"camus.{name[len('camus_'):]}.") for x in (decl, seq))
    if ila_rewrites(spec):                  # ila(): the locator t_leaf_calls' ila_rewrite leaves
        types.append(ila_metadata_type())
        members.append(f"    {ILA_META}_t ila;   // ila_rewrite's locator: yours to write into the address")
        decl, seq = (x.replace(f"meta.{ILA_META}.", "camus.ila.") for x in (decl, seq))
    if is_attrs(spec):                      # attribute values: camus.attrs.<field>
        types.append(attrs_meta_type(spec))
        members.append(f"    {ATTRS_META}_t attrs;   // the frame's attributes (0: not carried)")
        decl, seq = (x.replace(f"meta.{ATTRS_META}.", "camus.attrs.") for x in (decl, seq))
    seq = "\n".join(line[4:] for line in seq.splitlines())     # one block less deep than the program's
    headers = sorted({q.instance for q in spec.query_fields if q.role is not Role.METADATA})
    if camus_compat and opts.arch != "v1model":
        raise BackendError(f"{spec.camus_control_file!r} is the Camus compiler's v1model control "
                           "(Camus.apply(hdr, standard_metadata)): use --arch v1model")
    slots = {"SPEC": spec.name, **meta_slots(schema), "TABLES": decl, "APPLY": seq,
             "FILE": spec.camus_control_file,
             "VAR_TYPES": "".join(t + "\n\n" for t in types), "VAR_MEMBERS": "".join("\n" + m for m in members),
             "HEADERS": ", ".join(f"hdr.{h}" for h in headers) or "none: metadata only"}
    return fill_template("camus_compat_v1model.p4" if camus_compat else f"camus_control_{opts.arch}.p4", slots)
