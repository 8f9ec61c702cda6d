"""docs/architecture.md stays true: every file its "Where to add" lists name exists, every module its
layer table names is a layer of tests/test_layers.py, and the registries it points to hold what it says."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT
from test_layers import LAYERS

DOC = (ROOT / "docs" / "architecture.md").read_text()


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start: end if end > 0 else None]


def test_every_file_the_where_to_add_lists_name_exists():
    paths = set(re.findall(r"`((?:traceanalyzer|templates|tests|sample_traces)/[^`<>*]+?)`", _section("Where to add")))
    assert len(paths) >= 10
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def test_the_layer_table_is_the_layers_the_imports_are_checked_against():
    rows = re.findall(r"^\| (\w+) \| (.+?) \| .+? \|$", _section("The layers"), re.M)
    table = {layer: set(re.findall(r"`([\w_]+)/?`", names)) for layer, names in rows if layer != "layer"}
    table["commands"] |= {"__init__"}  # "the package `__init__`"
    assert table == {layer: set(names) for layer, names in LAYERS.items()}


def test_a_reader_names_its_kind_and_is_in_the_registry():
    from traceanalyzer.formats import registry

    modules = registry.reader_modules()
    assert {r.KIND for r in modules} == set(registry.KINDS) == {"trace", "counters", "host", "requests"}
    for reader in modules:
        assert callable(reader.sniff) and (callable(getattr(reader, "read", None))
                                           or callable(getattr(reader, "read_path", None))), reader.__name__
    # every reader module of the package is in the registry (none is forgotten)
    folder = Path(registry.__file__).parent
    listed = {r.__name__.rsplit(".", 1)[-1] for r in modules}
    with_kind = {p.stem for p in folder.glob("*.py") if "\nKIND = " in "\n" + p.read_text()}
    assert with_kind == listed


def test_every_metric_says_where_it_is_made_and_defined():
    from traceanalyzer.result import metrics as M
    from traceanalyzer.result.definitions import FIGURES

    section = _section("Where each figure is defined")
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+) \|$", section, re.M))
    assert set(rows) == {m.key for m in M.METRICS} | {M.VERDICT.key}
    for key, row in rows.items():
        made, words = row.split(" | ")
        files = re.findall(r"`((?:analyses|diagnosis|result|formats|run)/\w+\.py|causes\.py)`", made + " " + words)
        assert files and all((ROOT / "traceanalyzer" / f).is_file() for f in files), (key, files)
        names = re.findall(r"`definitions\.py` ((?:`\w+`(?:, )?)+)", words)
        assert all(n in FIGURES for group in names for n in re.findall(r"`(\w+)`", group)), (key, names)
