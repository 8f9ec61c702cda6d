"""Write `basic.pftrace`: `basic.json` converted to a Perfetto protobuf trace by traceanalyzer's own
writer (`traceanalyzer.formats.pftrace_write`, encoded as PyTorch's Perfetto backend would). Its figures
are basic.json's (see basic.expected.json); tests/test_pftrace.py checks both.

    python sample_traces/make_pftrace.py            # into sample_traces/; or: make_pftrace.py OUTDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from traceanalyzer.formats.pftrace_write import convert  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    convert(HERE / "basic.json", out / "basic.pftrace")


if __name__ == "__main__":
    main()
