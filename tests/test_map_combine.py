"""What leaves a rank's worker (`run.map.RankOutput`: its figures, diagnosis and drawn tracks) and the one
place its typed result is made (`combine`, through `result.build.rank_result`)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES

from traceanalyzer import intervals as iv
from traceanalyzer.analyses import figures as F
from traceanalyzer.analyses import figures_of
from traceanalyzer.analyses import tracks as TR
from traceanalyzer.diagnosis import diagnose
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.result import build as B
from traceanalyzer.run import map as M

MIN_GAP_NS = 100_000


def _options(logs: bool) -> M.AnalysisOptions:
    return M.AnalysisOptions(MIN_GAP_NS, True, False, None, 1 << 30, False, logs)


@pytest.mark.parametrize("name", ["input_bound.json", "launch_bound.json.gz", "memcpy_bound.json"])
def test_the_result_made_from_what_travels_is_the_result_of_the_whole_figures(name, monkeypatch):
    """The worker cuts each idle set to the gaps the result shows (here past 3 rows, the longest) and keeps
    the top gaps' causes: the typed result is the one the uncut figures give."""
    monkeypatch.setattr(B, "MAX_GAP_ROWS", 3)
    tl = read_file(SAMPLES / name, ReadOptions(cache=False))
    whole = figures_of(tl, MIN_GAP_NS)
    dr = diagnose(whole).ranks[0]
    (out,) = M.analyze_rank_timeline(tl, _options(logs=False)).ranks
    for full, cut in zip(whole.ranks[0].devices, out.figures.devices):
        assert len(full.idle) > len(cut.idle)
        assert len(cut.idle) <= 3 + len(full.gaps.top)
        assert [cut.idle.cause[g.index] for g in cut.gaps.top] == [full.idle.cause[g.index] for g in full.gaps.top]
        assert [cut.idle.start_ns[g.index] for g in cut.gaps.top] == [g.start_ns for g in full.gaps.top]
    assert B.rank_result(out.figures, out.diagnosis, 0, {}) == B.rank_result(whole.ranks[0], dr, 0, {})
    assert out.tracks.count == TR.count_rank_tracks(tl, 0) > 0


def test_the_figures_carry_the_gpu_work_and_waits_the_logs_need_only_for_logs():
    tl = read_file(SAMPLES / "input_bound.json", ReadOptions(cache=False))
    r = figures_of(tl, MIN_GAP_NS).ranks[0]
    for d in r.devices:
        want = F.work_union(tl, 0, d.device)
        assert np.array_equal(d.busy.work[0], want[0]) and np.array_equal(d.busy.work[1], want[1])
        assert iv.total(iv.clip(d.busy.work, d.busy.window.start_ns, d.busy.window.end_ns)) == d.busy.busy_ns
    assert len(r.dataloader_waits[0]) > 0 and iv.total(r.dataloader_waits) == r.dataloader_wait_ns
    assert r.dataloader_waits[0].min() >= r.window.start_ns and r.dataloader_waits[1].max() <= r.window.end_ns
    (kept,) = M.analyze_rank_timeline(tl, _options(logs=True)).ranks
    (left,) = M.analyze_rank_timeline(tl, _options(logs=False)).ranks
    assert iv.total(kept.figures.dataloader_waits) == r.dataloader_wait_ns
    assert all(len(d.busy.work[0]) == len(w.busy.work[0]) for d, w in zip(kept.figures.devices, r.devices))
    assert not len(left.figures.dataloader_waits[0]) and not any(len(d.busy.work[0]) for d in left.figures.devices)


def test_each_class_name_is_one_thing():
    """A figure type (ns, analyses/) and the result's type (us, result/) never share a name, nor do the run's and
    the readers' types: a name read in a traceback or a notebook says which one it is."""
    import ast
    from collections import defaultdict

    from conftest import ROOT

    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "traceanalyzer").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(str(path.relative_to(ROOT)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
