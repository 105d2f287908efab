"""Stateless covers of filters, and filters printed back as rule text.

Camus evaluates state functions (`count/sum/avg` over a window) at the last hop only: a
window counted at every hop would count only what earlier hops let through, and subscribers
would get wrong results. Earlier hops forward by the filter's *stateless cover*: every state
relation replaced by "anything goes" in the direction that only widens the filter (true
where it is asserted, false under a `not`). The cover is exactly the guard that updates the
last hop's window (lowering substitutes TRUE for state literals the same way), so the last hop
sees every message its windows must count.
"""
from __future__ import annotations

from .rules_ast import And, Const, Filter, Not, Or, Rel, StateFn, TrueFilter
from .rules_parser import parse_rules


def has_state(f: Filter) -> bool:
    if isinstance(f, Rel):
        return isinstance(f.left, StateFn)
    if isinstance(f, Not):
        return has_state(f.arg)
    if isinstance(f, (And, Or)):
        return any(has_state(a) for a in f.args)
    return False


def _const_text(c: Const) -> str:
    return c.text if c.prefix_len is None else f"{c.text}/{c.prefix_len}"


def filter_text(f: Filter) -> str:
    """Rule text that parses back to `f` (fully parenthesised where precedence matters)."""
    if isinstance(f, TrueFilter):
        return "true"
    if isinstance(f, Rel):
        left = f.left
        if isinstance(left, StateFn) and left.fn == "every":
            return f"every({left.modulus}" + (f", {left.counter})" if left.counter else ")")
        if isinstance(left, StateFn):
            inner = left.attr.name + (f", {left.counter}" if left.counter else "")
            lhs = f"{left.fn}({inner})"
        else:
            lhs = left.name
        return f"{lhs} {f.op} {_const_text(f.right)}"
    if isinstance(f, Not):
        return f"not ({filter_text(f.arg)})"
    if isinstance(f, And):
        return " and ".join(f"({filter_text(a)})" if isinstance(a, Or) else filter_text(a) for a in f.args)
    if isinstance(f, Or):
        return " or ".join(filter_text(a) for a in f.args)
    raise TypeError(f)


_FALSE: Filter = Not(TrueFilter(0), 0)


def _cover(f: Filter, negated: bool) -> Filter:
    if isinstance(f, Rel) and isinstance(f.left, StateFn):
        # widen: the relation holds (asserted) or fails (under an odd number of nots) freely
        return _FALSE if negated else TrueFilter(f.offset)
    if isinstance(f, Not):
        return Not(_cover(f.arg, not negated), f.offset)
    if isinstance(f, And):
        return And(tuple(_cover(a, negated) for a in f.args))
    if isinstance(f, Or):
        return Or(tuple(_cover(a, negated) for a in f.args))
    return f


def _simplify(f: Filter) -> Filter:
    """Fold the true/false constants the cover introduced (keeps the text short)."""
    if isinstance(f, Not):
        inner = _simplify(f.arg)
        if isinstance(inner, Not) and isinstance(inner.arg, TrueFilter):
            return TrueFilter(f.offset)
        return Not(inner, f.offset)
    if isinstance(f, (And, Or)):
        args = [_simplify(a) for a in f.args]
        is_true = [isinstance(a, TrueFilter) for a in args]
        is_false = [isinstance(a, Not) and isinstance(a.arg, TrueFilter) for a in args]
        if isinstance(f, And):
            if any(is_false):
                return _FALSE
            args = [a for a, t in zip(args, is_true) if not t]
            if not args:
                return TrueFilter(0)
            return args[0] if len(args) == 1 else And(tuple(args))
        if any(is_true):
            return TrueFilter(0)
        args = [a for a, fl in zip(args, is_false) if not fl]
        if not args:
            return _FALSE
        return args[0] if len(args) == 1 else Or(tuple(args))
    return f


def stateless_cover(filter_text_in: str) -> str:
    """The filter's stateless cover as rule text (the text itself when it has no state)."""
    rules, _ = parse_rules(f"{filter_text_in} : fwd(1)", "<filter>")
    f = rules[0].filter
    if not has_state(f):
        return filter_text_in
    return filter_text(_simplify(_cover(f, False)))

