"""The data plane's error, apart from the modules that raise it: the map and object helpers
(maps.py, bpfinfo.py) raise it without importing the program loader (program.py imports them)."""
from __future__ import annotations


class DataplaneError(RuntimeError):
    """A data-plane operation failed; the message says what to do."""
