"""The `camus-xdp` command: compile, check and explain subscriptions (data plane, controller
and benchmarks add their own commands as they land)."""
from __future__ import annotations

import gc
import importlib

import click

# Commands that read a rule set once and end: the cyclic collector is off while they run. It
# walked their millions of live objects (parsed rules, tables, the state file's lines) again and
# again: at 100K rules 1.4 s of a 5.3 s `update`, 0.65 s of a 2.0 s refresh. Reference counting
# frees what they drop (rule trees and tables hold no cycles). Long-running commands (agent,
# controller, edge, demo) keep it: compiler/heap.py looks after theirs.
ONE_SHOT = frozenset({"attach", "update", "compile", "check", "explain"})


def _collector_back() -> None:
    """The collector on again after a one-shot command, its survivors frozen first (else the
    first collection would walk them all; in its own process the command ends here anyway)."""
    gc.freeze()
    gc.enable()


# Each command's module is imported when the command runs (or help lists them): `update` is
# meant to take well under a second at 100K rules, and importing every command's libraries
# (networkx, grpc, the P4 back end) took 0.3 s of it.
COMMAND_MODULES = {
    "compile": "cli_compile", "check": "cli_compile", "explain": "cli_compile", "apps": "cli_compile",
    "demo": "cli_compile", "attach": "cli_attach", "update": "cli_update", "overload": "cli_dataplane",
    "detach": "cli_dataplane", "stats": "cli_dataplane", "status": "cli_dataplane", "metrics": "cli_dataplane",
    "install-units": "cli_dataplane",
    "bench": "cli_bench", "controller": "cli_controller", "agent": "cli_controller",
    "subscribe": "cli_subscribe", "unsubscribe": "cli_subscribe", "subscriptions": "cli_subscribe",
    "edge": "cli_edge", "verify": "cli_verify",
}


class LazyGroup(click.Group):
    """The commands of COMMAND_MODULES, each imported from its module when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is None:
            return None
        commands = importlib.import_module(f"camus.{module}").COMMANDS
        return next(c for c in commands if c.name == cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="camus-xdp")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Packet subscriptions for Linux hosts (XDP) and programmable switches (P4).

    \b
    Write what each subscriber wants as rules over the fields of a message-format spec:
        stock == GOOGL and price > 50 : fwd(1)
    then compile them once into staged match tables that every data plane runs.

    \b
    Try:  camus-xdp demo
          camus-xdp apps                       (the shipped examples and their paths)
          camus-xdp compile apps/itch/itch.p4 apps/itch/rules.txt -o out/
          camus-xdp explain apps/itch/itch.p4 apps/itch/rules.txt --message 'stock=GOOGL price=60'
    """
    if ctx.invoked_subcommand in ONE_SHOT and gc.isenabled():
        gc.disable()
        ctx.call_on_close(_collector_back)


