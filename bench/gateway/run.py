#!/usr/bin/env python3
"""The gateway benchmark (issue 7), side by side in one run, against the same
fake engine (`modelplane engine-sim`):

  direct         the engine itself (the baseline every "added" figure subtracts)
  modelplane     `modelplane gateway`
  nginx          Debian's nginx as a plain reverse proxy (keep-alive upstream)
  litellm        LiteLLM proxy (PyPI `litellm[proxy]`)
  vllm-router    PyPI `vllm-router`, round robin and cache aware
  sglang-router  PyPI `sglang-router`, round robin and cache aware

The gateway under test is pinned to core 0; the engine and the load generator
(`bench/gateway/loadgen`) share core 1. Reported per gateway: added latency at
concurrency 1 (p50, p99) against direct, also with everything on one core;
request rate at concurrency 64 with 1 KB and 200 KB prompts, and the gateway's
CPU time per request; added time to first token and added inter-chunk gap for
streams of 64 chunks 20 ms apart; resident memory idle and with 1,000
concurrent streams.

    python3 bench/gateway/run.py                 # everything (about 10 minutes)
    python3 bench/gateway/run.py --only modelplane nginx --seconds 3
    python3 bench/gateway/run.py --pairs 7 --skip-setup   # modelplane vs nginx, A B A B …

One pass of each swings widely on a shared two-core machine (58% to 104% of
nginx in three passes), so `--pairs N` alternates modelplane and nginx N times
(A B A B …), each run measuring the request rate at concurrency 64 with 1 KB
prompts and the gateway's CPU time per request, and reports the median of the
N pairwise ratios (modelplane / nginx).

It installs what is missing (nginx from Debian, the Python gateways into
bench/gateway/.venv) and builds the release binaries first.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "bench" / "gateway"
VENV = HERE / ".venv"
RELEASE = ROOT / "target" / "release"
GATEWAY_CORE, ENGINE_CORE = "0", "1"
MODEL = "m"
LITELLM_KEY = "sk-bench"

ENGINE_PORT, HOLD_ENGINE_PORT, GATEWAY_PORT = 19101, 19102, 19180


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def setup(python_gateways=True):
    log("building release binaries …")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "modelplane", "-p", "gateway-loadgen"], cwd=ROOT, check=True)
    if not shutil.which("nginx"):
        log("installing nginx (Debian) …")
        subprocess.run(["apt-get", "install", "-y", "-q", "nginx-light"], check=False, stdout=subprocess.DEVNULL)
        if not shutil.which("nginx"):
            subprocess.run(["apt-get", "update", "-q"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "-q", "nginx-light"], check=True, stdout=subprocess.DEVNULL)
    if python_gateways and not (VENV / "bin" / "vllm-router").exists():
        log("installing litellm[proxy], vllm-router, sglang-router into bench/gateway/.venv …")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]", "vllm-router==0.1.17", "sglang-router==0.3.2"], check=True)


def pinned(core, argv, **kw):
    return subprocess.Popen(["taskset", "-c", core, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **kw)


def stop(proc):
    if proc and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def tree(pid):
    """The pid and all its descendants."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
            except (OSError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid):
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def loadgen(mode, addr, *args, headers=()):
    argv = ["taskset", "-c", ENGINE_CORE, str(RELEASE / "gateway-loadgen"), mode, "--addr", addr, "--model", MODEL]
    for h in headers:
        argv += ["--header", h]
    out = subprocess.run(argv + list(args), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def wait_ready(addr, headers=(), timeout=180):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            req = urllib.request.Request(f"http://{addr}/v1/chat/completions", data=body, headers={"content-type": "application/json"})
            for h in headers:
                name, value = h.split(":", 1)
                req.add_header(name.strip(), value.strip())
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return
        except Exception as e:  # noqa: BLE001 - anything means "not yet"
            last = e
        time.sleep(0.5)
    raise RuntimeError(f"{addr} not ready: {last}")


# === the gateways ===

def modelplane(core, engine_port, work):
    config = work / "modelplane.yaml"
    config.write_text(f"""apiVersion: modelplane.ai/v1alpha1
kind: ModelService
metadata: {{ name: {MODEL}, namespace: bench }}
spec:
  endpoints:
  - selector: {{ matchLabels: {{ modelplane.ai/deployment: {MODEL} }} }}
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelEndpoint
metadata: {{ name: engine, namespace: bench, labels: {{ modelplane.ai/deployment: {MODEL} }} }}
spec: {{ url: "http://127.0.0.1:{engine_port}/", rewritePath: / }}
""")
    return pinned(core, [str(RELEASE / "modelplane"), "gateway", "--config", str(config), "--listen", f"127.0.0.1:{GATEWAY_PORT}", "--threads", "1"]), ()


def nginx(core, engine_port, work):
    conf = work / "nginx.conf"
    conf.write_text(f"""daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  client_max_body_size 16m;
  upstream engine {{ server 127.0.0.1:{engine_port}; keepalive 256; }}
  server {{
    listen 127.0.0.1:{GATEWAY_PORT};
    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
""")
    return pinned(core, ["nginx", "-c", str(conf)]), ()


def litellm(core, engine_port, work):
    conf = work / "litellm.yaml"
    conf.write_text(f"""model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: http://127.0.0.1:{engine_port}/v1
      api_key: none
general_settings:
  master_key: {LITELLM_KEY}
""")
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY_DISABLED="true", LITELLM_LOG="ERROR")
    proc = pinned(core, [str(VENV / "bin" / "litellm"), "--config", str(conf), "--host", "127.0.0.1", "--port", str(GATEWAY_PORT), "--num_workers", "1"], env=env)
    return proc, (f"Authorization: Bearer {LITELLM_KEY}",)


def vllm_router(policy):
    def start(core, engine_port, work):
        return pinned(core, [str(VENV / "bin" / "vllm-router"), "--host", "127.0.0.1", "--port", str(GATEWAY_PORT), "--worker-urls", f"http://127.0.0.1:{engine_port}", "--policy", policy, "--log-level", "error"]), ()
    return start


def sglang_router(policy):
    def start(core, engine_port, work):
        return pinned(core, [str(VENV / "bin" / "sglang-router"), "launch", "--host", "127.0.0.1", "--port", str(GATEWAY_PORT), "--worker-urls", f"http://127.0.0.1:{engine_port}", "--policy", policy, "--log-level", "error"]), ()
    return start


GATEWAYS = {
    "modelplane": modelplane,
    "nginx": nginx,
    "litellm": litellm,
    "vllm-router": vllm_router("round_robin"),
    "vllm-router-cache-aware": vllm_router("cache_aware"),
    "sglang-router": sglang_router("round_robin"),
    "sglang-router-cache-aware": sglang_router("cache_aware"),
}


def measure(name, start, args, work, direct):
    gw = f"127.0.0.1:{GATEWAY_PORT}"
    result = {"gateway": name}
    proc, headers = start(GATEWAY_CORE, ENGINE_PORT, work)
    try:
        wait_ready(gw, headers)
        time.sleep(1)
        result["rss_idle_mib"] = rss_mib(proc.pid)
        lat = loadgen("latency", gw, "--requests", str(args.requests), headers=headers)
        result["latency_p50_us"], result["latency_p99_us"] = lat["p50_us"], lat["p99_us"]
        before = cpu_seconds(proc.pid)
        rate = loadgen("rate", gw, "--seconds", str(args.seconds), "--concurrency", "64", headers=headers)
        result["rps_1k"] = rate["rps"]
        result["failed_1k"] = rate["failed"]
        result["cpu_us_per_request"] = (cpu_seconds(proc.pid) - before) / max(rate["ok"], 1) * 1e6
        rate = loadgen("rate", gw, "--seconds", str(args.seconds), "--concurrency", "64", "--body-bytes", "204800", headers=headers)
        result["rps_200k"] = rate["rps"]
        result["failed_200k"] = rate["failed"]
        stream = loadgen("stream", gw, "--requests", str(args.streams), "--concurrency", "8", "--tokens", "64", headers=headers)
        result.update({k: stream[k] for k in ("ttft_p50_us", "ttft_p99_us", "gap_p50_us", "gap_p99_us")})
    finally:
        stop(proc)
    # Memory with 1,000 streams open, against the slow engine.
    proc, headers = start(GATEWAY_CORE, HOLD_ENGINE_PORT, work)
    try:
        wait_ready(gw, headers)
        hold = subprocess.Popen(["taskset", "-c", ENGINE_CORE, str(RELEASE / "gateway-loadgen"), "hold", "--addr", gw, "--model", MODEL, "--streams", "1000", "--seconds", "4", *sum((["--header", h] for h in headers), [])], stdout=subprocess.PIPE, text=True)
        line = hold.stdout.readline()
        result["streams_held"] = json.loads(line).get("holding", 0) if line.strip() else 0
        time.sleep(2)
        result["rss_1000_streams_mib"] = rss_mib(proc.pid)
        hold.wait()
    finally:
        stop(proc)
    if direct:
        for k in ("latency_p50_us", "latency_p99_us", "ttft_p50_us", "ttft_p99_us", "gap_p50_us", "gap_p99_us"):
            result["added_" + k] = result[k] - direct[k]
    return result


def same_core_latency(name, start, args, work, direct_same):
    """Added latency with the gateway on the engine's core: no cross-core wake-up."""
    gw = f"127.0.0.1:{GATEWAY_PORT}"
    proc, headers = start(ENGINE_CORE, ENGINE_PORT, work)
    try:
        wait_ready(gw, headers)
        lat = loadgen("latency", gw, "--requests", str(args.requests), headers=headers)
    finally:
        stop(proc)
    return {"added_same_core_p50_us": lat["p50_us"] - direct_same["p50_us"], "added_same_core_p99_us": lat["p99_us"] - direct_same["p99_us"]}


def rate_run(name, args, work):
    """Request rate at concurrency 64 with 1 KB prompts, and CPU µs per request."""
    gw = f"127.0.0.1:{GATEWAY_PORT}"
    proc, headers = GATEWAYS[name](GATEWAY_CORE, ENGINE_PORT, work)
    try:
        wait_ready(gw, headers)
        time.sleep(0.5)
        before = cpu_seconds(proc.pid)
        rate = loadgen("rate", gw, "--seconds", str(args.seconds), "--concurrency", "64", headers=headers)
        cpu = (cpu_seconds(proc.pid) - before) / max(rate["ok"], 1) * 1e6
    finally:
        stop(proc)
    return {"rps": rate["rps"], "cpu_us": cpu, "failed": rate["failed"]}


def paired(args, work):
    """modelplane and nginx alternated; the median of the pairwise ratios."""
    pairs = []
    for i in range(args.pairs):
        a = rate_run("modelplane", args, work)
        b = rate_run("nginx", args, work)
        pair = {"pair": i + 1, "modelplane": a, "nginx": b, "rps_ratio": a["rps"] / b["rps"], "cpu_ratio": a["cpu_us"] / b["cpu_us"]}
        log(json.dumps(pair))
        pairs.append(pair)
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    summary = {
        "pairs": args.pairs,
        "seconds_each": args.seconds,
        "median_rps_ratio": median([p["rps_ratio"] for p in pairs]),
        "median_cpu_ratio": median([p["cpu_ratio"] for p in pairs]),
        "median_modelplane_rps": median([p["modelplane"]["rps"] for p in pairs]),
        "median_nginx_rps": median([p["nginx"]["rps"] for p in pairs]),
        "median_modelplane_cpu_us": median([p["modelplane"]["cpu_us"] for p in pairs]),
        "median_nginx_cpu_us": median([p["nginx"]["cpu_us"] for p in pairs]),
        "failed": sum(p["modelplane"]["failed"] + p["nginx"]["failed"] for p in pairs),
    }
    print("| pair | modelplane req/s | nginx req/s | ratio | modelplane CPU µs/req | nginx CPU µs/req | CPU ratio |")
    print("|---|---|---|---|---|---|---|")
    for p in pairs:
        a, b = p["modelplane"], p["nginx"]
        print(f"| {p['pair']} | {a['rps']:.0f} | {b['rps']:.0f} | {p['rps_ratio']:.2f} | {a['cpu_us']:.1f} | {b['cpu_us']:.1f} | {p['cpu_ratio']:.2f} |")
    print(f"median of the pairwise ratios: request rate {summary['median_rps_ratio']:.2f} of nginx, CPU per request {summary['median_cpu_ratio']:.2f}x nginx's; {summary['failed']} failed requests")
    (HERE / "last-pairs.json").write_text(json.dumps({"summary": summary, "pairs": pairs}, indent=2) + "\n")


def table(results):
    cols = [
        ("gateway", "gateway", "{}"),
        ("added_latency_p50_us", "added p50 (µs)", "{:.0f}"),
        ("added_latency_p99_us", "added p99 (µs)", "{:.0f}"),
        ("added_same_core_p50_us", "same core p50 (µs)", "{:.0f}"),
        ("added_same_core_p99_us", "same core p99 (µs)", "{:.0f}"),
        ("rps_1k", "req/s 1 KB c64", "{:.0f}"),
        ("cpu_us_per_request", "CPU µs/req", "{:.1f}"),
        ("rps_200k", "req/s 200 KB c64", "{:.0f}"),
        ("added_ttft_p50_us", "added TTFT p50 (µs)", "{:.0f}"),
        ("added_gap_p99_us", "added gap p99 (µs)", "{:.0f}"),
        ("rss_idle_mib", "RSS idle (MiB)", "{:.1f}"),
        ("rss_1000_streams_mib", "RSS 1,000 streams (MiB)", "{:.1f}"),
    ]
    lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        cells = []
        for key, _, fmt in cols:
            value = r.get(key)
            cells.append("–" if value is None else fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=list(GATEWAYS), help="gateways to run (default: all)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each request-rate run")
    parser.add_argument("--requests", type=int, default=3000, help="requests of each latency run")
    parser.add_argument("--streams", type=int, default=24, help="streams of each streaming run")
    parser.add_argument("--skip-setup", action="store_true")
    parser.add_argument("--pairs", type=int, help="only modelplane vs nginx, alternated this many times (A B A B …)")
    args = parser.parse_args()
    if not args.skip_setup:
        setup(python_gateways=not args.pairs)
    names = args.only or list(GATEWAYS)
    work = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    for d in ("body", "proxy"):
        (work / d).mkdir()
    engine = pinned(ENGINE_CORE, [str(RELEASE / "modelplane"), "engine-sim", "--model", MODEL, "--listen", f"127.0.0.1:{ENGINE_PORT}", "--itl-ms", "20", "--output-tokens", "1", "--max-concurrency", "100000"])
    slow = pinned(ENGINE_CORE, [str(RELEASE / "modelplane"), "engine-sim", "--model", MODEL, "--listen", f"127.0.0.1:{HOLD_ENGINE_PORT}", "--itl-ms", "1000", "--max-concurrency", "100000"])
    results = []
    try:
        wait_ready(f"127.0.0.1:{ENGINE_PORT}")
        wait_ready(f"127.0.0.1:{HOLD_ENGINE_PORT}")
        if args.pairs:
            paired(args, work)
            return
        eng = f"127.0.0.1:{ENGINE_PORT}"
        log("direct …")
        direct = loadgen("latency", eng, "--requests", str(args.requests))
        direct.update(loadgen("stream", eng, "--requests", str(args.streams), "--concurrency", "8", "--tokens", "64"))
        direct_rate = loadgen("rate", eng, "--seconds", str(args.seconds), "--concurrency", "64")
        direct_rate_200k = loadgen("rate", eng, "--seconds", str(args.seconds), "--concurrency", "64", "--body-bytes", "204800")
        direct_row = {"gateway": "direct (engine)", "latency_p50_us": direct["p50_us"], "latency_p99_us": direct["p99_us"], "rps_1k": direct_rate["rps"], "rps_200k": direct_rate_200k["rps"], **{k: direct[k] for k in ("ttft_p50_us", "ttft_p99_us", "gap_p50_us", "gap_p99_us")}}
        results.append(direct_row)
        direct_for_added = {"latency_p50_us": direct["p50_us"], "latency_p99_us": direct["p99_us"], **{k: direct[k] for k in ("ttft_p50_us", "ttft_p99_us", "gap_p50_us", "gap_p99_us")}}
        for name in names:
            log(f"{name} …")
            try:
                row = measure(name, GATEWAYS[name], args, work, direct_for_added)
                direct_same = loadgen("latency", eng, "--requests", str(args.requests))
                row.update(same_core_latency(name, GATEWAYS[name], args, work, direct_same))
            except Exception as e:  # noqa: BLE001 - one gateway failing must not end the run
                log(f"{name} failed: {e}")
                row = {"gateway": f"{name} (failed: {e})"}
            results.append(row)
            log(json.dumps(row))
    finally:
        stop(engine)
        stop(slow)
    print(table(results))
    (HERE / "last-run.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
