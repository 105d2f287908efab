"""The P4_16 templates the p4 back end fills (shipped as package data: camus.p4)."""
