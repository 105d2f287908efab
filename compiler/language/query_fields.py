"""Query-field declarations: which header field a `query_field*` pragma names, its width and
its value type (split from spec_parser, which reads the file and applies the other pragmas)."""
from __future__ import annotations

from dataclasses import replace

from . import topics
from .builtin_headers import BUILTIN, METADATA, builtin_field
from .errors import CompileError, Position
from .spec import HeaderField, HeaderInstance, HeaderType, MatchKind, QueryField, Role, Spec


def _int(text: str) -> int:
    return int(text.split("w")[-1].replace("_", ""), 0) if "w" in text else int(text.replace("_", ""), 0)


def add_query_field(spec: Spec, pragma: str, args: list[str], pos: Position,
                    on_field: tuple[str, str] | None, kind: MatchKind) -> None:
    """Declare the query field a query_field* pragma names (checked against the headers)."""
    if on_field is not None:   # field annotation: the instance(s) of that header type
        htype, fname = on_field
        targets = [f"{n}.{fname}" for n in spec.stack if spec.instances[n].type.name == htype]
        if len(targets) != 1:
            raise CompileError(f"annotation on {htype}.{fname} needs exactly one instance of "
                               f"{htype}, found {len(targets)}", pos)
        path, width = targets[0], None
    else:
        if not args or len(args) > 2:
            raise CompileError(f"{pragma} takes a field and an optional width", pos, "(header.field[, width])")
        path = args[0]
        width = _int(args[1]) if len(args) == 2 else None
    found = spec.header_field(path)
    if found is None:
        # Also accept the header *type* name in place of the instance name.
        head, _, fname = path.rpartition(".")
        insts = [n for n in spec.stack if spec.instances[n].type.name == head]
        if len(insts) == 1:
            path = f"{insts[0]}.{fname}"
            found = spec.header_field(path)
    if found is None:
        found = _undeclared_field(spec, path, width, pragma, pos)
    inst, hf = found
    if width is not None and width != hf.width:
        raise CompileError(f"{path} is declared bit<{hf.width}> but the pragma says {width}", pos)
    if spec.query_field(path):
        raise CompileError(f"{path} is declared as a query field twice", pos)
    if hf.width > topics.MAX_TOPIC_BITS:
        raise CompileError(f"{path} is {hf.width} bits wide; query fields are at most 128 "
                           f"(topics {topics.MAX_TOPIC_BITS})", pos)
    spec.query_fields.append(QueryField(inst.name, hf.name, hf.width, hf.offset, kind, inst.role,
                                        _infer_vtype(hf, kind)))


def _undeclared_field(spec: Spec, path: str, width: int | None,
                      pragma: str, pos: Position) -> tuple[HeaderInstance, HeaderField]:
    """A field the spec does not declare, Camus style: a well-known header or intrinsic
    metadata (real layouts, compiler/language/builtin_headers.py), else a field of an
    application header declared by its pragma alone (with its width; pragma order is field
    order, and no byte layout is known: the XDP back end refuses such fields)."""
    head, _, fname = path.rpartition(".")
    if not head or not fname:
        raise CompileError(f"{path!r} in {pragma} is not instance.field", pos, "e.g. car.lat")
    inst = spec.instances.get(head)
    if inst is not None and inst.layout == "declared":
        raise CompileError(f"unknown field {path!r} in {pragma}: header {head} has no field {fname}", pos,
                           ", ".join(f.name for f in inst.type.fields))
    if spec.stack and head not in METADATA:       # a spec with its own headers: a typo, not a new header
        raise CompileError(f"unknown field {path!r} in {pragma}", pos,
                           f"instance.field of a declared header ({', '.join(spec.stack)}) or switch metadata "
                           f"({', '.join(METADATA)})")
    if head in BUILTIN:
        htype, role = BUILTIN[head]
        hf = builtin_field(htype, fname)
        if hf is None:
            raise CompileError(f"unknown field {path!r} in {pragma}: the built-in {htype.name} has no field "
                               f"{fname}", pos, ", ".join(f.name for f in htype.fields if not f.name.startswith("_")))
        inst = inst or HeaderInstance(head, htype, role, "builtin")
        spec.instances[head] = inst
        return inst, replace(hf, name=fname)        # the real layout, under the name the rules use
    if width is None:
        raise CompileError(f"unknown field {path!r} in {pragma}", pos,
                           f"declare its header, or give the field's width: {pragma}({path}, 16)")
    fields = inst.type.fields if inst else ()
    hf = HeaderField(fname, width, sum(f.width for f in fields))
    inst = HeaderInstance(head, HeaderType(f"{head}_t", fields + (hf,)), Role.OTHER, "pragma")
    spec.instances[head] = inst
    return inst, hf


VTYPES = ("int", "string", "ipv4", "ipv6", "mac", "topic", "subject", "dnsname")


def _infer_vtype(hf: HeaderField, kind: MatchKind) -> str:
    """Value type from the declared typedef, else from shape: a byte-aligned exact or LPM field
    of 2+ bytes may hold text (ITCH's stock), everything else holds numbers. Override with
    `@pragma query_type(h.f, T)`."""
    t = hf.type_name.lower()
    for hint, vtype in (("ipv6", "ipv6"), ("ip6", "ipv6"), ("ipv4", "ipv4"), ("ip4", "ipv4"),
                        ("mac", "mac"), ("str", "string"), ("char", "string"), ("sym", "string")):
        if hint in t:
            return vtype
    if kind is MatchKind.LPM and hf.width in (32, 128):
        return "ipv4" if hf.width == 32 else "ipv6"
    if kind in (MatchKind.EXACT, MatchKind.LPM) and hf.width % 8 == 0 and hf.width >= 16:
        return "string"
    return "int"
