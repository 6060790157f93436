#!/usr/bin/env python3
"""Writes one YAML file describing a large observed fleet, for the
`modelplane schedule` benchmark: CLUSTERS InferenceClusters with their
status (8 GPU pools of 16 nodes each: H100, H200, L4, L40S, A100, B200 with
8 or 1 devices, memory capacity and product attributes; Ready with a gateway
address), REPLICAS ModelReplicas already placed across them by 100 other
deployments (one Standalone engine claiming a whole 8-GPU node), and one
ModelDeployment of 10 replicas to place.

Default: 1,000 clusters x 8 pools, 10,000 replicas = 11,001 documents.

Usage: python3 bench/schedule/fleet.py [CLUSTERS [REPLICAS]] > /tmp/fleet.yaml
"""

import sys

POOLS = [
    ("h100", "NVIDIA-H100-80GB-HBM3", 8, "81559Mi"),
    ("h200", "NVIDIA-H200", 8, "143771Mi"),
    ("l4", "NVIDIA-L4", 1, "23034Mi"),
    ("l40s", "NVIDIA-L40S", 1, "46068Mi"),
    ("a100", "NVIDIA-A100-SXM4-80GB", 8, "81920Mi"),
    ("b200", "NVIDIA-B200", 8, "183359Mi"),
    ("h100-spot", "NVIDIA-H100-80GB-HBM3", 8, "81559Mi"),
    ("l4-x4", "NVIDIA-L4", 4, "23034Mi"),
]

CLUSTER = """apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: c{i:04d}
  labels: {{region: r{region}}}
spec:
  cluster:
    source: Existing
    existing: {{secretRef: {{name: c{i:04d}-kubeconfig}}}}
status:
  conditions:
  - {{type: Ready, status: "True", reason: Available}}
  gateway: {{address: "10.{a}.{b}.1"}}
  gpuPools:
{pools}"""

POOL = """  - name: {name}
    nodes: 16
    devices:
    - name: gpu
      claim: DRA
      driver: gpu.nvidia.com
      deviceClassName: gpu.nvidia.com
      count: {count}
      attributes:
        productName: {{string: {product}}}
        driverVersion: {{version: "570.124.6"}}
      capacity:
        memory: {{value: "{memory}"}}
"""

REPLICA = """apiVersion: modelplane.ai/v1alpha1
kind: ModelReplica
metadata:
  name: other-{d:03d}-{h}
  namespace: team-{t}
  labels:
    modelplane.ai/deployment: other-{d:03d}
    modelplane.ai/cluster: c{c:04d}
    modelplane.ai/replica-index: "{index}"
spec:
  clusterName: c{c:04d}
  engines:
  - name: main
    copies: 1
    members:
    - role: Standalone
      nodePoolName: {pool}
      deviceRequests:
      - name: gpu
        deviceClassName: gpu.nvidia.com
        count: 8
        selectors:
        - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0
      template:
        spec:
          containers:
          - name: engine
            image: vllm/vllm-openai:v0.23.0
            args: ["--served-model-name=other-{d:03d}"]
"""

DEPLOYMENT = """apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: llama-70b
  namespace: ml-team
spec:
  replicas: 10
  template:
    spec:
      engines:
      - name: main
        members:
        - nodeSelector:
            devices:
            - name: gpu
              count: 8
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("140Gi")) >= 0
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: ["--served-model-name=llama-70b", "--tensor-parallel-size=8"]
"""


def main():
    clusters = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    replicas = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    out = sys.stdout
    docs = []
    pools = "".join(
        POOL.format(name=n, product=p, count=c, memory=m) for n, p, c, m in POOLS
    )
    for i in range(clusters):
        docs.append(
            CLUSTER.format(i=i, region=i % 10, a=i // 250, b=i % 250, pools=pools)
        )
    # 8-GPU pools only (h100, h200, a100, b200, h100-spot): whole-node replicas.
    eight = [p[0] for p in POOLS if p[2] == 8]
    for r in range(replicas):
        d = r % 100
        cluster = (r * 7919) % clusters
        index = r // 100
        docs.append(
            REPLICA.format(
                d=d,
                h=f"{r:05x}",
                t=d % 5,
                c=cluster,
                index=index,
                pool=eight[r % len(eight)],
            )
        )
    docs.append(DEPLOYMENT)
    out.write("---\n".join(docs))


if __name__ == "__main__":
    main()
