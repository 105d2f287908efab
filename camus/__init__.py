"""camus-xdp."""
import os

# The official P4Runtime protobufs (PyPI `p4runtime`) were generated for an older protobuf: with
# today's they load only with the pure-Python implementation, which must be chosen before any
# module imports google.protobuf (set here, the first import of anything of ours).
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
