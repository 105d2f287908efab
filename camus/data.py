"""Where the files shipped with the package live: the BPF sources, the P4 templates and the
example applications. Found through importlib.resources, so a wheel installed anywhere works
the same as a checkout (an editable install maps the checkout's folders)."""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def _dir(package: str) -> Path:
    return Path(str(files(package)))


def bpf_dir() -> Path:
    return _dir("camus.bpf")


def p4_dir() -> Path:
    return _dir("camus.p4")


def apps_dir() -> Path:
    return _dir("camus.apps")


def shipped_apps() -> dict[str, tuple[Path, Path]]:
    """App name -> (spec, rules) for every folder under apps/: a folder with one .p4 spec and
    rules.txt is one app; a folder with several specs is one app per spec, `FOLDER/SPEC`, with
    SPEC_rules.txt where it exists, else the folder's rules.txt."""
    out = {}
    for d in sorted(p for p in apps_dir().iterdir() if p.is_dir() and not p.name.startswith("_")):
        specs = sorted(d.glob("*.p4"))
        if len(specs) == 1 and (d / "rules.txt").exists():
            out[d.name] = (specs[0], d / "rules.txt")
            continue
        for spec in specs if len(specs) > 1 else []:
            rules = next((r for r in (d / f"{spec.stem}_rules.txt", d / "rules.txt") if r.exists()), None)
            if rules is not None:
                out[f"{d.name}/{spec.stem}"] = (spec, rules)
    return out
