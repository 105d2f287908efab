"""The XDP/TC back end: the C program specialised from the spec (program.py), the map contents
that realise the tables (tables.py, with the bit-vector stage in bitvector.py and custom actions
in custom.py) and table deltas as map writes (delta.py). The rest of the tree uses what is named
here; the data plane (dataplane/) loads the program and writes the maps."""
from .backend import EbpfBackend
from .bitvector import sized_limits
from .program import EbpfLimits, program_text
from .contents import CapacityError, MapContents
from .tables import fitted_contents, map_contents

__all__ = ["CapacityError", "EbpfBackend", "EbpfLimits", "MapContents", "fitted_contents", "map_contents",
           "program_text", "sized_limits"]
