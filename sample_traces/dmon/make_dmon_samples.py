"""Writes the crafted nvidia-smi logs in this folder (stdlib only, byte-identical every run).

idle_runs.log: `nvidia-smi dmon -s pu -o DT` style, 2 GPUs, 40 one-second samples from
2024-01-04 13:00:00 (local time), the header repeated after 20 samples. Known answers:
* GPU 0 SM utilisation: 5 x 80, 3 x 0, 4 x 60, 12 x 0, 6 x 90, 1 x 0, 3 x 70, 6 x 0
  -> 4 zero runs, 22 zero samples, the longest 12 samples (12 s) from 13:00:12 to 13:00:23;
* GPU 1: 0 everywhere, with a missing value ('-') at 13:00:10
  -> 2 zero runs (10 and 29 samples), the longest 29 samples from 13:00:11 to 13:00:39.

Usage: python3 sample_traces/dmon/make_dmon_samples.py [OUTDIR]
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

GPU0 = [80] * 5 + [0] * 3 + [60] * 4 + [0] * 12 + [90] * 6 + [0] * 1 + [70] * 3 + [0] * 6
GPU1: list[object] = [0] * 40
GPU1[10] = "-"
START = datetime(2024, 1, 4, 13, 0, 0)
HEADER = ("#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk \n"
          "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz \n")


def idle_runs() -> str:
    out = [HEADER]
    for i, (a, b) in enumerate(zip(GPU0, GPU1)):
        if i == 20:
            out.append(HEADER)
        t = (START + timedelta(seconds=i)).strftime("%Y%m%d   %H:%M:%S")
        for gpu, sm in ((0, a), (1, b)):
            busy = isinstance(sm, int) and sm > 0
            row = [gpu, 250 if busy else 62, 51, "-", sm, sm // 2 if isinstance(sm, int) else "-", 0, 0,
                   1593, 1410 if busy else 345]
            out.append(f" {t} " + "".join(f"{v:>7}" for v in row) + " \n")
    return "".join(out)


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "idle_runs.log").write_text(idle_runs())


if __name__ == "__main__":
    main()
