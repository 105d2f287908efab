"""The conformance corpus: every app's spec + rules + messages -> expected deliveries, as data
(apps/<app>/corpus*.txt), run through every back end: the filters themselves, the IR, the switch
entries (the entry interpreter) and the XDP program in the kernel (root, BPF_PROG_TEST_RUN).

A corpus file:

    # spec: itch.p4                    paths relative to the corpus file
    # rules: rules.txt
    # refused: p4 topic                a back end that must refuse the app, and a word of its reason
    stock=GOOGL price=600 => fwd(1)    message fields => the actions (`-`: delivered nowhere)

Messages run in file order on one engine per back end (stateful rules see them in that order).
A back end that refuses an app is checked to refuse it, with the reason, not skipped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.registry import engine
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import compile_files
from tests.conftest import APPS

LAYERS = ("filters", "ir", "p4", pytest.param("xdp", marks=pytest.mark.bpf))


@dataclass
class Corpus:
    path: Path
    spec: Path
    rules: Path
    refused: dict[str, str] = field(default_factory=dict)        # layer -> a word of its refusal
    cases: list[tuple[int, str, str]] = field(default_factory=list)   # (line, message, expected)


def load_corpus(path: Path) -> Corpus:
    head: dict[str, str] = {}
    refused: dict[str, str] = {}
    cases = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"#\s*(spec|rules|refused):\s*(.*)", line)
        if m and m[1] == "refused":
            layer, why = m[2].split(None, 1)
            refused[layer] = why.strip()
        elif m:
            head[m[1]] = m[2].strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            msg, sep, want = line.partition("=>")
            assert sep, f"{path.name}:{n}: `message => actions` expected"
            cases.append((n, msg.strip(), " ".join(want.split())))
    assert {"spec", "rules"} <= set(head), f"{path.name}: `# spec:` and `# rules:` lines expected"
    return Corpus(path, path.parent / head["spec"], path.parent / head["rules"], refused, cases)


CORPORA = sorted(APPS.glob("*/corpus*.txt"))


def _names(actions) -> str:
    return " ".join(actions.names()) or "-"


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("path", CORPORA, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_app_delivers_its_corpus_on_every_back_end(path: Path, layer: str) -> None:
    corpus = load_corpus(path)
    assert corpus.cases, f"{path}: no cases"
    c = compile_files(str(corpus.spec), str(corpus.rules))
    if layer in corpus.refused:
        with pytest.raises(BackendError, match=corpus.refused[layer]):
            engine(layer, c)
        return
    eng = engine(layer, c)
    try:
        for line, text, want in corpus.cases:
            got = _names(eng.run(message_from_text(c.spec, text), 0)[0])
            assert got == want, f"{path.name}:{line}: {text} -> {got} via {layer}, corpus says {want}"
    finally:
        close = getattr(eng, "close", None)        # the kernel engine unloads its program
        if close is not None:
            close()


def test_every_app_has_a_corpus() -> None:
    apps = {p.parent.name for p in CORPORA}
    assert apps >= {p.name for p in APPS.iterdir() if p.is_dir() and not p.name.startswith("_")}


TARGETS = {"ir": "ir", "p4": "p4", "xdp": "ebpf"}        # corpus layer -> `compile --target`


@pytest.mark.parametrize("target", sorted(set(TARGETS.values())))
@pytest.mark.parametrize("path", CORPORA, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_app_compiles_for_every_target_as_the_cli_does(path: Path, target: str, tmp_path: Path) -> None:
    """`camus-xdp compile SPEC RULES --target T -o DIR` for every corpus's app: what the corpus test
    above runs through an engine must also build as a user builds it (issue 40: the car app's
    switch entries passed the engine and failed the CLI's checks)."""
    from click.testing import CliRunner
    from camus.cli import main
    corpus = load_corpus(path)
    refused = next((why for layer, why in corpus.refused.items() if TARGETS.get(layer) == target), None)
    r = CliRunner().invoke(main, ["compile", str(corpus.spec), str(corpus.rules), "--target", target, "-o", str(tmp_path)])
    if refused is not None:
        assert r.exit_code == 1 and refused in r.output, r.output
        return
    assert r.exit_code == 0, r.output
    assert (tmp_path / "pipeline.json").exists()
