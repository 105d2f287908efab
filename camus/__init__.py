"""camus-xdp."""
import importlib.util
import os


def _p4runtime_needs_pure_python() -> bool:
    """The official P4Runtime protobufs (PyPI `p4runtime`) come generated for an old protobuf:
    today's loads them only with its pure-Python implementation, 20-50x slower than the compiled
    one. scripts/p4runtime_upb.py (run by setup) rewrites them in today's form; until it has, the
    pure-Python implementation is chosen here, before any module imports google.protobuf (this
    is the first import of anything of ours)."""
    try:
        spec = importlib.util.find_spec("p4.v1.p4runtime_pb2")
    except (ImportError, ValueError):
        return False
    if spec is None or spec.origin is None:
        return False
    with open(spec.origin, encoding="utf-8", errors="replace") as f:
        head = f.read(8192)
    return "AddSerializedFile" not in head


if _p4runtime_needs_pure_python():
    os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
