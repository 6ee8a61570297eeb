#!/usr/bin/env python3
"""Where a CubeCL run's GPU time goes: sums CubeCL's profiling log per kernel.

  cubecl_kernels.py LOG [TOP]

LOG is the file CubeCL writes with CUBECL_DEBUG_LOG=LOG CUBECL_DEBUG_OPTION=profile
(cubecl-runtime 0.10: one line "| <duration> | <kernel name>" per launch, each
launch timed on its own, so the run is slower than an unprofiled one; the
shares are what this is for). Prints the total and the TOP (default 40)
kernels by time: milliseconds, share, launches, name.
"""
import collections
import re
import sys

UNIT = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
LINE = re.compile(r"^\| ([0-9.]+)(ns|µs|us|ms|s)\s*\| (.*)$")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 40
    seconds = collections.defaultdict(float)
    launches = collections.Counter()
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if m:
                name = m.group(3).strip()
                seconds[name] += float(m.group(1)) * UNIT[m.group(2)]
                launches[name] += 1
    total = sum(seconds.values())
    print(f"{sum(launches.values())} profiled launches, {total:.3f} s of kernel time in all")
    for name, t in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{t * 1e3:10.1f} ms {100 * t / total:5.1f} % {launches[name]:7d}x  {name[:300]}")


if __name__ == "__main__":
    main()
