"""camus-xdp verify: decides, for every possible message, that a set of tables gives what the
rules give (exact targets) or at least that (switch covers), with a counterexample otherwise.

It shares only the language's parsers and the spec with the compiler it checks: the rules are
read into formulas over the fields' values here (rules.py), the tables into per-field
transition functions by their targets' own match semantics (machines.py), and the two are
walked together over every field's whole domain (check.py). No normal form, decision diagram,
lowering or table-building code of the compiler is used.
"""
