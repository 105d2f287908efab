"""The P4_16 templates the p4 back end fills (shipped as package data: camus.p4).

In a checkout this folder is also importable as a top-level `p4`, the name of the official
P4Runtime protobufs (PyPI `p4runtime`: p4.v1, p4.config.v1). Extending the package path lets
`import p4.v1.p4runtime_pb2` find them whichever `p4` comes first on sys.path."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
