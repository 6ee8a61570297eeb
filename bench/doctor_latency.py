#!/usr/bin/env python3
"""Wall time of `envgen doctor` invocations, for docs/benchmarks.md.

hyperfine is not installed on the CI-class VM, so this does what
`hyperfine -N --warmup 3 --runs 40` does: run each command 3 times to warm the
page cache, then 40 times, and print mean ± standard deviation and min … max
in milliseconds. No GPU is probed: every command describes its host with
--assume-gpu/--assume-driver, and NVML is skipped.

Usage: python3 bench/doctor_latency.py path/to/envgen
"""

import os
import shlex
import statistics
import subprocess
import sys
import time

COMMANDS = [
    "--assume-gpu A30 --assume-driver 535.261.03 --json",
    "--assume-gpu A30 --assume-driver 535.261.03",
    '--assume-gpu "RTX 5090" --assume-driver 560.35.03',
    '--assume-gpu "RTX 5090" --assume-driver 560.35.03 --json',
    "--assume-gpu A100 --assume-driver 535.104.05 --precision fp8",
]
WARMUP, RUNS = 3, 40


def main() -> None:
    binary = sys.argv[1]
    env = {"PATH": "/nonexistent", "ENVGEN_NO_NVML": "1"}
    print(f"load average before: {os.getloadavg()}")
    for command in COMMANDS:
        argv = [binary, "doctor", *shlex.split(command)]
        for _ in range(WARMUP):
            subprocess.run(argv, capture_output=True, env=env, check=False)
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, env=env, check=False)
            times.append((time.perf_counter() - start) * 1000)
        print(
            f"envgen doctor {command}: {statistics.mean(times):.1f} ms ± "
            f"{statistics.stdev(times):.1f} ({min(times):.1f} … {max(times):.1f}), {RUNS} runs"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
