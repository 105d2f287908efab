"""From syntax to logic: typed formulas over variables (lowering), interval sets, disjunctive form,
alpha approximation."""
