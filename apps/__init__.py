"""The shipped applications: spec + rules per folder (package data: camus.apps)."""
