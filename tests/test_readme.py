"""The README and the code say the same thing: figure definitions and the test command."""

import re

from conftest import ROOT

from traceanalyzer.result.definitions import FIGURES


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_every_definition_is_in_the_readme():
    readme = _flat((ROOT / "README.md").read_text())
    for name, text in FIGURES.items():
        assert f"**{name}**: {_flat(text)}" in readme, name


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.*?)\n```", readme, re.DOTALL)
    test_cmd = next(c for c in commands if "pytest" in c)
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_the_readme_lists_every_host_metric_as_the_timeline_defines_it():
    from traceanalyzer.timeline import HOST_METRICS

    readme = (ROOT / "README.md").read_text()
    listed = re.findall(r"^\| `(\w+)` \| (.+) \|$", readme.split("Host metrics (units in the name", 1)[1].split("\n\n")[1],
                        re.MULTILINE)
    assert dict(listed) == HOST_METRICS
