"""The docs say what the code says: the tables generated from the registries (figures, causes,
verdicts, thresholds, metrics) are the committed ones, every link between README and docs resolves,
and the site builds strictly."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest
from conftest import ROOT

DOCS = ROOT / "docs"
spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "_generate.py")
assert spec and spec.loader
generate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generate)

# Which page holds which generated table (a block may not go missing unnoticed).
BLOCKS = {
    "figures.md": {"figures", "run_metrics"},
    "ci.md": {"run_metrics", "bmf_measures"},
    "diagnosis.md": {"causes", "cause_patterns", "verdicts", "thresholds"},
    "inputs.md": {"counter_metrics", "host_metrics"},
}


@pytest.mark.parametrize("page", sorted({p.name for p in generate.pages()} | set(BLOCKS)))
def test_the_committed_tables_are_the_generated_ones(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    found = {m.group(2) for m in generate.BLOCK.finditer(text)}
    assert BLOCKS.get(page, set()) <= found, f"docs/{page} lost a generated block"
    assert generate.generated(text) == text, f"docs/{page} is out of step with the code: run python docs/_generate.py"


def test_the_diagnosis_page_names_every_threshold_cause_and_verdict():
    from traceanalyzer import causes as C
    from traceanalyzer.analyses import thresholds as attribution
    from traceanalyzer.diagnosis import thresholds as rules

    page = (DOCS / "diagnosis.md").read_text(encoding="utf-8")
    names = [n for module in (attribution, rules) for n in vars(module) if n.isupper()]
    assert len(names) >= 15
    for name in (*names, *C.CAUSES, *(v.id for v in C.VERDICT_LIST)):
        assert f"| `{name}`" in page, name


def test_every_figure_definition_is_in_the_figures_page_verbatim():
    from traceanalyzer.result.definitions import FIGURES

    page = re.sub(r"\s+", " ", (DOCS / "figures.md").read_text(encoding="utf-8"))
    for name, text in FIGURES.items():
        assert f"**{name}**: {re.sub(r'[ ]+', ' ', ' '.join(text.split()))}" in page, name


def test_a_new_cause_needs_only_the_registry_and_a_regenerated_page(monkeypatch):
    """What adding a cause to causes.py does to the docs: the regenerated page names it; nothing else
    has to be written by hand (tests/test_add_a_cause.py covers the code side)."""
    from test_add_a_cause import GC_CAUSE, GC_VERDICT

    from traceanalyzer import causes as C

    monkeypatch.setattr(C, "CAUSE_LIST", (*C.CAUSE_LIST, GC_CAUSE))
    monkeypatch.setattr(C, "VERDICT_LIST", (*C.VERDICT_LIST, GC_VERDICT))
    monkeypatch.setattr(C, "VERDICTS", (*C.VERDICTS, GC_VERDICT.id))
    page = generate.generated((DOCS / "diagnosis.md").read_text(encoding="utf-8"))
    assert "| `gc` | garbage collection | `gc_bound` |" in page
    assert "| `gc_bound` | GC bound |" in page and "^gc\\.collect$" in page


def test_every_relative_link_in_the_readme_and_docs_resolves():
    for page in (ROOT / "README.md", *DOCS.glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"\w+://", target):
                continue
            assert (page.parent / target).exists(), (page.name, target)


def test_the_readme_is_about_two_screens_and_links_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 120
    for page in ("report", "python", "ci", "inputs", "figures", "diagnosis", "clusters", "formats",
                 "architecture", "service"):
        assert f"(docs/{page}.md" in readme, page
    screenshot = ROOT / "docs" / "report.png"
    assert "](docs/report.png)" in readme and screenshot.stat().st_size < 150_000


def test_every_page_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        assert f": {page.name}\n" in nav, page.name


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "diagnosis" / "index.html").exists()


def test_every_install_line_uses_our_distribution_name():
    """`traceanalyzer` on the public index is an unrelated package: every install line names ours."""
    name = re.search(r'^name = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert name == "traceanalyzer-ml"
    code = list((ROOT / "traceanalyzer").rglob("*.py"))
    lines = [line for page in (ROOT / "README.md", *DOCS.glob("*.md"), *code)
             for line in page.read_text(encoding="utf-8").splitlines() if "pip install" in line]
    assert any(name in line for line in lines)
    for line in lines:
        assert not re.search(r"pip install (-\S+ )*'?traceanalyzer(?![-\w])", line), line
