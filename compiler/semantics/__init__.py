"""Reference semantics: the IR interpreter, the rules evaluated directly, windows for state
functions, explain (what each layer does with a message)."""
