#!/usr/bin/env python3
"""Writes a fleet for `modelplane render` benchmarks: 100 InferenceClusters
(half Standard, half Dynamo, one 64-node 8xH200 pool each, from one class) and
100 Leader+Worker ModelDeployments of 10 replicas each, with a ModelCache.

Usage: python3 bench/render-fleet.py > /tmp/fleet.yaml
"""

CLASS = """apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata:
  name: h200-8x
spec:
  provisioning:
    provider: EKS
    eks:
      instanceType: p5en.48xlarge
      accelerator: {type: nvidia-h200, count: 8}
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 8
    capacity:
      memory: {value: "143771Mi"}
"""

CLUSTER = """apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: c{i:03d}
spec:
  stack: {stack}
  cluster:
    source: EKS
    eks: {{region: us-east-1}}
  nodePools:
  - name: h200
    className: h200-8x
    nodeCount: 64
    zones: [us-east-1a]
"""

DEPLOYMENT = """apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: model-{i:03d}
  namespace: ml
spec:
  replicas: 10
  template:
    spec:
      modelCacheRef: {{name: weights}}
      engines:
      - name: main
        members:
        - role: Leader
          nodeSelector:
            devices:
            - name: gpu
              count: 8
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("120Gi")) >= 0
              - cel: device.driver == "gpu.nvidia.com"
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                command: ["/bin/sh", "-c"]
                args: ["exec vllm serve /mnt/models --nnodes=2 --node-rank=$(MODELPLANE_RANK)"]
        - role: Worker
          worker: {{nodes: 1}}
          nodeSelector:
            devices:
            - name: gpu
              count: 8
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("120Gi")) >= 0
              - cel: device.driver == "gpu.nvidia.com"
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                command: ["/bin/sh", "-c"]
                args: ["exec vllm serve /mnt/models --nnodes=2 --node-rank=$(MODELPLANE_RANK) --headless"]
"""

CACHE = """apiVersion: modelplane.ai/v1alpha1
kind: ModelCache
metadata:
  name: weights
  namespace: ml
spec:
  source: HuggingFace
  huggingFace: {repo: Qwen/Qwen3-8B, sizeGiB: 20}
"""

docs = [CLASS, CACHE]
docs += [CLUSTER.format(i=i, stack="Standard" if i % 2 == 0 else "Dynamo") for i in range(100)]
docs += [DEPLOYMENT.format(i=i) for i in range(100)]
print("---\n".join(docs))
