"""The language front end: rule and spec syntax, their parsers, positioned errors, stateless covers."""
