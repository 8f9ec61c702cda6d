"""The README and the code say the same thing: the test command CI runs is the one the README gives.
(The reference text lives in docs/; tests/test_docs.py ties it to the code.)"""

import re

from conftest import ROOT


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.*?)\n```", readme, re.DOTALL)
    test_cmd = next(c for c in commands if "pytest" in c)
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_the_readme_starts_with_a_report_on_a_bundled_sample_then_the_tests():
    readme = (ROOT / "README.md").read_text()
    first, second = re.findall(r"```sh\n(.*?)\n```", readme, re.DOTALL)[:2]
    sample = re.search(r"traceanalyzer report (sample_traces/\S+)", first)
    assert sample and (ROOT / sample.group(1)).exists()
    assert "pip install" in first and "pytest" in second
