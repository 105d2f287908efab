"""The attach configuration: created on first use with the shipped example, relative paths from
the file's folder, clear errors (with the position for YAML mistakes)."""
from __future__ import annotations

import pytest

from camus.config import ConfigError, load_config
from tests.conftest import APPS


def test_created_on_first_use_with_the_shipped_example(tmp_path) -> None:
    path = tmp_path / "etc" / "config.yaml"
    cfg = load_config(path)
    assert cfg.created and path.exists() and cfg.spec.endswith("itch.p4") and cfg.rules.endswith("rules.txt")
    assert cfg.ports is None and cfg.mode == "native"
    again = load_config(path)
    assert not again.created and again.spec == cfg.spec


def test_relative_paths_and_errors(tmp_path) -> None:
    (tmp_path / "apps").symlink_to(APPS)
    path = tmp_path / "c.yaml"
    path.write_text("spec: apps/itch/itch.p4\nrules: apps/itch/rules.txt\nmode: generic\n")
    cfg = load_config(path)
    assert cfg.spec == str(tmp_path / "apps/itch/itch.p4") and cfg.mode == "generic"
    for text, message in (("spec: [\n", r"c.yaml:2:1: not valid YAML"),
                          ("spec: a\nrules: b\ncolour: red\n", "unknown key"),
                          ("rules: apps/itch/rules.txt\n", "needs both"),
                          ("spec: apps/itch/itch.p4\nrules: nope.txt\n", "rules file .* does not exist"),
                          ("spec: apps/itch/itch.p4\nrules: apps/itch/rules.txt\nmode: fast\n", "mode must be")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_apps_list_for_an_interface_serving_several(tmp_path) -> None:
    (tmp_path / "apps").symlink_to(APPS)
    path = tmp_path / "c.yaml"
    path.write_text("apps:\n  - {name: itch, spec: apps/itch/itch.p4, rules: apps/itch/rules.txt}\n"
                    "  - {name: dns, spec: apps/dns/dns.p4, rules: apps/dns/rules.txt}\nmode: generic\n")
    cfg = load_config(path)
    assert cfg.spec is None and [a.name for a in cfg.apps] == ["itch", "dns"] and cfg.mode == "generic"
    assert cfg.apps[1].spec == str(tmp_path / "apps/dns/dns.p4") and cfg.apps[1].ports is None
    for text, message in (("apps: []\n", "is a list of"),
                          ("apps:\n  - {name: a, spec: apps/itch/itch.p4}\n", "app 1: needs name, spec and rules"),
                          ("apps:\n  - {name: a, spec: apps/itch/itch.p4, rules: apps/itch/rules.txt, x: 1}\n",
                           "unknown key"),
                          ("apps:\n  - {name: a, spec: apps/itch/itch.p4, rules: nope.txt}\n",
                           "app a: rules file .* does not exist"),
                          ("spec: apps/itch/itch.p4\napps:\n  - {name: a, spec: s, rules: r}\n", "not both")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_the_template_shows_the_apps_form(tmp_path) -> None:
    import yaml
    path = tmp_path / "config.yaml"
    load_config(path)
    commented = "\n".join(line[2:] for line in path.read_text().splitlines() if line.startswith("#   - ")
                          or line.startswith("# apps:"))
    apps = yaml.safe_load(commented)["apps"]
    assert [a["name"] for a in apps] == ["itch", "dns"]
