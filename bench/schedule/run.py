#!/usr/bin/env python3
"""The `modelplane schedule` benchmark, one command:

    python3 bench/schedule/run.py

Builds the release binary, writes the fleet of bench/schedule/fleet.py (1,000
InferenceClusters x 8 pools with their status, 10,000 existing ModelReplicas and
one ModelDeployment: 11,001 documents, about 10 MB, in one file) and times,
alternating A B A B, five runs each of:

  A  modelplane schedule -f fleet.yaml --output json   (the target: <= 1 s, <= 150 MB)
  B  modelplane validate -f fleet.yaml                 (baseline: every document admitted
                                                        with the line of every field)

Reports the median wall time and peak resident memory of each (from
/usr/bin/time) and their ratio.
"""

import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "target", "release", "modelplane")
RUNS = 5


def timed(args):
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M", BINARY] + args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    seconds, kb = out.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(kb) / 1024


def main():
    subprocess.run(
        ["cargo", "build", "--release", "-p", "modelplane"], cwd=ROOT, check=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        fleet = os.path.join(tmp, "fleet.yaml")
        with open(fleet, "w") as f:
            subprocess.run(
                [sys.executable, os.path.join(ROOT, "bench", "schedule", "fleet.py")],
                stdout=f,
                check=True,
            )
        size = os.path.getsize(fleet) / 1e6
        runs = {"schedule": [], "validate": []}
        for _ in range(RUNS):
            runs["schedule"].append(timed(["schedule", "-f", fleet, "--output", "json"]))
            runs["validate"].append(timed(["validate", "-f", fleet]))
    print(f"fleet: 1,000 clusters x 8 pools, 10,000 replicas, 11,001 documents, {size:.1f} MB")
    medians = {}
    for name, samples in runs.items():
        wall = statistics.median(s[0] for s in samples)
        rss = statistics.median(s[1] for s in samples)
        medians[name] = wall
        walls = ", ".join(f"{s[0]:.2f}" for s in samples)
        print(f"{name:9} median {wall:.2f} s, peak {rss:.0f} MiB  (runs: {walls})")
    print(f"schedule / validate: {medians['schedule'] / medians['validate']:.2f}")


if __name__ == "__main__":
    main()
