"""camus-xdp verify: prove that compiled tables give exactly what the rules give."""
from __future__ import annotations

import json
import sys
import time
from typing import Any
from pathlib import Path

import click

from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.language.spec_parser import load_spec


@click.command()
@click.argument("spec", metavar="SPEC RULES | IFACE[@APP]")
@click.argument("rules", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option("--target", type=click.Choice(["ir", "ebpf", "p4"]), default="ir", show_default=True,
              help="Which tables: the Pipeline IR, the XDP maps as attach would write them, or the switch's "
                   "P4 entries.")
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False), default=None,
              help="P4: check the entries a `compile --target p4 -o DIR` wrote (entries.txtpb, p4info.txtpb) "
                   "instead of compiling the rules here.")
@click.option("--switch", "switch", metavar="HOST:PORT", default=None,
              help="P4: check what the switch at HOST:PORT holds, read back over P4Runtime (as a reader: "
                   "a controller writing to it keeps its role).")
@click.option("--device-id", type=int, default=1, show_default=True, help="--switch: the P4Runtime device id.")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="--switch over TLS: the CA that signed the switch's certificate.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="--switch over mutual TLS: our certificate (with --tls-key).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--tls-name", default=None, help="--switch over TLS: the name in the switch's certificate, when "
                                               "HOST is not it.")
@click.option("--cover", is_flag=True,
              help="--dir/--switch: the entries may be a cover (the compile fitted them): check that no "
                   "message gets fewer ports than the rules give, and bound the extra ones.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: verdict, regions, counterexample.")
def verify(spec: str, rules: str | None, target: str, directory: str | None, switch: str | None, device_id: int,
           tls_ca: str | None, tls_cert: str | None, tls_key: str | None, tls_name: str | None,
           cover: bool, as_json: bool) -> None:
    """Decide, for every possible message, that the tables give exactly what RULES give.

    \b
    With one argument, IFACE (or IFACE@APP), the tables are those live in the kernel: the
    attached unit's pinned XDP maps are read from the root it serves now (slots, search trees,
    radix buckets, prefixes, leaves: each read as the XDP program looks it up) and checked
    against the rules its state file says are live (needs root, like attach).

    \b
    The rules are read with the language's parser only and walked together with the tables
    over every field's whole domain (no sampling; none of the compiler's normal forms, diagrams
    or table building is reused). A switch cover (over-delivery by design) is checked to give
    at least every port the rules give, and the most extra ports any message gets is reported.

    \b
    Exit status: 0 equal (or a cover that never under-delivers), 1 they differ (a counterexample
    message is printed: field values, what the rules give, what the tables give, the entries on
    its path; `explain --message` shows the same), 2 the checker cannot decide (it says why).

    \b
    Examples:
        camus-xdp verify apps/itch/itch.p4 apps/itch/rules.txt
        camus-xdp compile apps/itch/itch.p4 rules.txt --target p4 -o sw/
        camus-xdp verify apps/itch/itch.p4 rules.txt --target p4 --dir sw/
        camus-xdp verify apps/itch/itch.p4 rules.txt --target p4 --switch 10.0.0.2:9559
        sudo camus-xdp verify eth0
    """
    from camus.verify.check import check
    from camus.verify.rules import TableDefect, Undecidable, read_rules
    from camus.verify.targets import attached_machine, compiled_machine, switch_p4_machine, written_p4_forms
    t0 = time.perf_counter()
    live: tuple[str, str, str, int] | None = None      # unit, its spec and rule files, live rules
    try:
        if rules is None:
            if directory is not None or switch is not None or target != "ir":
                raise Undecidable("IFACE reads the XDP maps live on it: --target, --dir and --switch take SPEC RULES")
            s, rs, (spec_path, rules_path, n_rules), machine = attached_machine(spec)
            target, live, forms = "live XDP", (spec, spec_path, rules_path, n_rules), {"": machine}
        elif not Path(spec).is_file():
            raise Undecidable(f"no spec file {spec}")
        elif directory is not None or switch is not None:
            s = load_spec(spec)
            rs = read_rules(s, Path(rules).read_text(), rules)
            if target != "p4" or (directory is not None and switch is not None):
                raise Undecidable("--dir and --switch read P4 entries, one of them: use --target p4")
            if directory is not None:
                forms = written_p4_forms(s, Path(directory))
            else:
                from camus.controller.tls import TlsFiles
                tls = TlsFiles(tls_cert, tls_key, tls_ca) if (tls_ca or tls_cert) else None
                forms = {"P4Runtime": switch_p4_machine(s, switch, device_id, tls, tls_name)}  # type: ignore[arg-type]
        else:
            s = load_spec(spec)
            rs = read_rules(s, Path(rules).read_text(), rules)
            from camus.compiler.compile import CompileOptions, compile_files, no_cyclic_gc
            with no_cyclic_gc():
                c = compile_files(spec, rules, CompileOptions(strategy="switch" if target == "p4" else "bdd"))
                if target == "p4":
                    from camus.compiler.backends.base import TargetOptions
                    from camus.compiler.backends.registry import backend
                    from camus.compiler.fitting import build_fitted
                    c = build_fitted(c, backend("p4"), TargetOptions()).compiled
                cover = c.pipeline.cover is not None or c.options.alpha > 1
                forms = {"": compiled_machine(c, target)}
        for form, m in forms.items():         # each form of the entries on its own; the first that differs
            result = check(rs, m, cover=cover)
            if form:
                target = f"p4 ({form})"
                if len(forms) > 1 and not as_json and result.verdict != "differs":
                    click.echo(f"{target}: {result.verdict}, {result.regions:,} regions")
            if result.verdict == "differs":
                break
        else:
            if len(forms) > 1:
                target = f"p4 ({', '.join(forms)})"
    except (CompileErrors, CompileError) as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    except TableDefect as exc:
        out = {"verdict": "differs", "reason": str(exc)}
        click.echo(json.dumps(out) if as_json else f"DIFFERS: the tables are ill-formed: {exc}")
        sys.exit(1)
    except Undecidable as exc:
        out = {"verdict": "undecidable", "reason": str(exc)}
        click.echo(json.dumps(out) if as_json else f"cannot decide: {exc}", err=not as_json)
        sys.exit(2)
    seconds = time.perf_counter() - t0
    if as_json:
        click.echo(json.dumps({**result.to_json(), "tables": target, "seconds": round(seconds, 2)}))
    elif result.verdict == "differs":
        cx = result.counterexample
        assert cx is not None
        message = " ".join(f"{k}={v}" for k, v in message_values(s, cx.values).items())
        windows = " ".join(f"{k}={v}" for k, v in cx.values.items() if k.startswith("state."))
        click.echo(f"DIFFERS: the tables and the rules disagree on the message\n  {message}\n"
                   + (f"  with the aggregates (after it is added) {windows}\n" if windows else "")
                   + f"  rules give:  {cx.rules.text()}\n  tables give: {cx.tables.text()}\n  path:")
        for step in cx.path:
            click.echo(f"    {step}")
        explained = (spec, rules) if live is None else live[1:3]
        click.echo(f"  camus-xdp explain {explained[0]} {explained[1]} --message '{message}'")
    else:
        what = ("a cover: every message gets at least the ports each of its rules gives, and at most "
                f"{result.max_ports} ports" if result.verdict == "covers" else "equal to the rules")
        click.echo(f"{target} tables {what}, for every message ({result.regions:,} regions, {seconds:.1f} s)")
        if live is not None:
            click.echo(f"  {live[3]:,} rules live on {live[0]} (from {live[2]}, spec {live[1]})")
    sys.exit(1 if result.verdict == "differs" else 0)


def message_values(spec: Any, values: dict[str, int]) -> dict[str, Any]:
    """A counterexample's values as `explain --message` takes them: wide fields whole, a topic
    as its text (`note.topic=plant/7/temp`) in place of its variables; state functions'
    aggregates (`state.K:...`, not fields of the message) left out."""
    from camus.verify.topic_rules import topic_text
    out: dict[str, Any] = {k: v for k, v in whole_values(values).items() if not k.startswith("state.")}
    for t in spec.topics.values():
        text = topic_text(t, values)
        head = f"{t.instance}.{t.name}/"
        if text is not None and " " not in text and "=" not in text:
            out = {k: v for k, v in out.items() if not k.startswith(head)}
            out[t.path] = text
    return out


def whole_values(values: dict[str, int]) -> dict[str, int]:
    """A message's field values with the two words of a wide field (`ipv6.dst/hi`, `/lo`: the
    low word is 64 bits) put back together, as `explain --message` takes the field."""
    out: dict[str, int] = {}
    for path, v in values.items():
        whole, _, part = path.rpartition("/")
        if part == "hi":
            out[whole] = out.get(whole, 0) | v << 64
        elif part == "lo":
            out[whole] = out.get(whole, 0) | v
        else:
            out[path] = v
    return out


COMMANDS = [verify]
