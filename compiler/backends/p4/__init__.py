"""The P4 back end: P4_16 programs for v1model and TNA from the spec (program.py, control.py and
the app-specific parsers), the entries that realise the tables (entries.py, checked against the
tables declared once in schema.py), P4Runtime messages (runtime.py), table deltas (delta.py), the
switch budget (budget.py) and an interpreter of the entries (interp.py). The rest of the tree
uses what is named here."""
from .backend import P4Backend, P4Engine
from .budget import Budget, over_budget, switch_resources
from .entries import P4Tables, p4_tables

__all__ = ["Budget", "P4Backend", "P4Engine", "P4Tables", "over_budget", "p4_tables", "switch_resources"]
