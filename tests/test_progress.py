"""Progress: only on a terminal and only for big inputs; the line says the stage and how much
of the input has been read."""

from __future__ import annotations

import io

from kineto_builder import KinetoTrace
from timelines import load_paths

from traceanalyzer.formats import ReadOptions
from traceanalyzer.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def trace(tmp_path):
    t = KinetoTrace()
    for i in range(50):
        t.step(i, i * 100, 90).kernel(i * 100 + 5, 50)
    return t.write(tmp_path / "t.json.gz")


def test_silent_when_not_a_terminal_or_small(tmp_path):
    path = trace(tmp_path)
    for stream, min_bytes in ((io.StringIO(), 0), (FakeTerminal(), 10**9)):
        p = Progress([path], stream=stream, min_bytes=min_bytes)
        load_paths([path], ReadOptions(progress=p.advance))
        p.stage("analysing")
        p.done()
        assert not p.enabled and stream.getvalue() == ""


def test_reports_read_bytes_and_stages_on_a_terminal(tmp_path):
    path = trace(tmp_path)
    term = FakeTerminal()
    p = Progress([path], stream=term, min_bytes=0)
    load_paths([path], ReadOptions(progress=p.advance))
    assert p.done_bytes == path.stat().st_size  # on-disk (compressed) bytes, all of them
    assert "(100%)" in p.line()
    p.stage("analysing")
    p.done()
    out = term.getvalue()
    assert "reading and decoding" in out and "analysing" in out
    assert out.endswith("\r")  # the line is cleared at the end
