"""camus-xdp."""
