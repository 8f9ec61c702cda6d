"""The command line's output formats and file suffixes are the renderer registries' (issue 45, part 5):
`--format` offers every renderer but the terminal summary, the format follows the output name by each
renderer's `extension` (the longest that matches), and a default output name ends with it."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import SAMPLES

from traceanalyzer.commands import main
from traceanalyzer.commands._options import output_format
from traceanalyzer.commands.diff import diff_command
from traceanalyzer.commands.report import report_command
from traceanalyzer.report import DIFF_RENDERERS, RENDERERS


def _choices(command: click.Command) -> list[str]:
    (opt,) = [p for p in command.params if p.name == "fmt"]
    assert isinstance(opt.type, click.Choice)
    return list(opt.type.choices)


def test_format_choices_are_the_registries_but_the_terminal_summary():
    assert _choices(report_command) == [n for n in RENDERERS if n != "text"] == ["html", "json", "md", "bmf"]
    assert _choices(diff_command) == [n for n in DIFF_RENDERERS if n != "text"] == ["html", "json", "md"]


@pytest.mark.parametrize(("name", "fmt"), [("r.html", "html"), ("r.HTM", "html"), ("r.json", "json"),
                                           ("run.bmf.json", "bmf"), ("r.md", "md"), ("r.markdown", "md"),
                                           ("r.txt", "html"), ("r", "html"), ("-", "html")])
def test_the_format_follows_the_renderers_extension(name, fmt):
    assert output_format(Path(name), None, RENDERERS) == fmt
    assert output_format(Path(name), "json", RENDERERS) == "json"  # --format wins


def test_a_diff_output_named_bmf_json_is_json_diff_has_no_bmf():
    assert output_format(Path("d.bmf.json"), None, DIFF_RENDERERS) == "json"


def test_the_default_output_name_ends_with_the_renderers_extension(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["report", str(SAMPLES / "basic.json"), "--format", "bmf", "-q"])
    assert res.exit_code == 0, res.output
    assert [p.name for p in tmp_path.iterdir()] == ["basic.report." + RENDERERS["bmf"].extension]
