#!/usr/bin/env python3
"""How much of a fleet's GPUs the fleet scheduler allocates, one command:

    python3 bench/schedule/packing.py [--baseline OTHER_MODELPLANE_BINARY]

Writes a fleet of 4 clusters, each with one pool of 8 nodes of 8 H100s
(256 GPUs), and 24 ModelDeployments of 4 replicas each, alternating tensor
parallel 2, 4 and 8 (one Standalone pod asking for that many GPUs): 448 GPUs
asked for, more than the fleet has. `modelplane schedule` places them one
after the other (by name, each seeing the replicas of those before it); the
harness reads how many replicas of each were placed and reports the GPUs
allocated, as a share of the fleet's.

With --baseline, the same fleet is scheduled by that binary too (for
example one built from a commit before device packing) and both are shown.
Uses target/debug/modelplane unless MODELPLANE points at another binary.
"""

import argparse
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("MODELPLANE", os.path.join(ROOT, "target", "debug", "modelplane"))
CLUSTERS, NODES, GPUS = 4, 8, 8
DEPLOYMENTS, REPLICAS, TP = 24, 4, (2, 4, 8)

CLASS = f"""apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata:
  name: h100-8x
spec:
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: {GPUS}
    capacity:
      memory: {{ value: 80Gi }}
"""

CLUSTER = """---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: {name}
spec:
  cluster:
    source: Existing
    existing:
      secretRef: {{ name: {name}, key: kubeconfig }}
  nodePools:
  - name: h100
    className: h100-8x
    nodeCount: {nodes}
"""

DEPLOYMENT = """---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: {name}
  namespace: bench
spec:
  replicas: {replicas}
  template:
    spec:
      engines:
      - name: main
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              count: {tp}
              selectors:
              - cel: device.driver == "gpu.nvidia.com"
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: ["--model=Qwen/Qwen3-8B", "--tensor-parallel-size={tp}"]
"""


def fleet():
    docs = [CLASS]
    docs += [CLUSTER.format(name=f"c{i}", nodes=NODES) for i in range(CLUSTERS)]
    tps = {}
    for i in range(DEPLOYMENTS):
        tp = TP[i % len(TP)]
        name = f"d{i:02}-tp{tp}"
        tps[f"bench/{name}"] = tp
        docs.append(DEPLOYMENT.format(name=name, replicas=REPLICAS, tp=tp))
    return "".join(docs), tps


def allocated(binary, path, tps):
    out = subprocess.run(
        [binary, "schedule", "-f", path], capture_output=True, text=True, check=True
    ).stdout
    placed = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^(\S+): (\d+) of \d+ replicas placed", out, re.M)
    }
    missing = set(tps) - set(placed)
    if missing:
        raise SystemExit(f"{binary}: no line for {sorted(missing)}:\n{out}")
    by_tp = {tp: sum(placed[d] for d in tps if tps[d] == tp) for tp in TP}
    return sum(placed[d] * tps[d] for d in tps), by_tp


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another modelplane binary to compare with")
    args = parser.parse_args()
    text, tps = fleet()
    total = CLUSTERS * NODES * GPUS
    asked = sum(tp * REPLICAS for tp in tps.values())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fleet.yaml")
        with open(path, "w") as f:
            f.write(text)
        print(f"fleet: {total} GPUs ({CLUSTERS} clusters x {NODES} nodes x {GPUS}); asked: {asked} GPUs")
        print("| binary | GPUs allocated | share | replicas placed (TP2 / TP4 / TP8) |")
        print("|---|---|---|---|")
        runs = [("this", BINARY)] + ([("baseline", args.baseline)] if args.baseline else [])
        for label, binary in runs:
            gpus, by_tp = allocated(binary, path, tps)
            placed = " / ".join(str(by_tp[tp]) for tp in TP)
            print(f"| {label} | {gpus} | {100 * gpus / total:.1f} % | {placed} |")


if __name__ == "__main__":
    main()
