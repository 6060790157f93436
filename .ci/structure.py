#!/usr/bin/env python3
"""Structure checks of DESIGN.md §2, run by .ci/run:

- no import cycle between the top-level modules of a crate (a module is
  src/<name>.rs or src/<name>/; read from `crate::<name>` paths, code before
  the first `#[cfg(test)]`, comments skipped);
- no dependency cycle between the workspace's crates, dev-dependencies
  included (`cargo metadata`);
- no file in crates/*/src over 800 lines (tests after `#[cfg(test)]`
  aside) unless its module doc says why, on a line starting `//! Long:`.
"""
import glob, json, os, re, subprocess, sys

MAX_LINES = 800
failures = []


def strongly_connected(graph):
    """Tarjan's components of size > 1, iteratively."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]; counter[0] += 1
                    stack.append(nxt); on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def code_of(path):
    text = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
    return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))


def module_cycles(src):
    graph = {}
    for path in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True):
        top = os.path.relpath(path, src).split(os.sep)[0].removesuffix(".rs")
        if top in ("lib", "main"):
            continue
        code = code_of(path)
        used = set(re.findall(r"crate::([a-z_][a-z0-9_]*)", code))
        for group in re.findall(r"crate::\{([^}]*)\}", code):
            used |= set(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
        graph.setdefault(top, set()).update(used - {top})
    graph = {m: {d for d in deps if d in graph} for m, deps in graph.items()}
    return strongly_connected(graph)


for src in sorted(glob.glob("crates/*/src")):
    for cycle in module_cycles(src):
        failures.append(f"{src}: modules import each other in a circle: {' '.join(cycle)}")

metadata = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"]))
members = {p["name"] for p in metadata["packages"]}
crates = {p["name"]: {d["name"] for d in p["dependencies"] if d["name"] in members}
          for p in metadata["packages"]}
for cycle in strongly_connected(crates):
    failures.append(f"crates depend on each other in a circle (dev-dependencies included): {' '.join(cycle)}")

for path in sorted(glob.glob("crates/*/src/**/*.rs", recursive=True)):
    text = open(path, encoding="utf-8").read()
    lines = len(text.split("#[cfg(test)]")[0].splitlines())
    if lines > MAX_LINES and not re.search(r"^//! Long:", text, re.M):
        failures.append(f"{path}: {lines} lines before its tests, over {MAX_LINES}, and no `//! Long:` reason")

for failure in failures:
    print("error:", failure, file=sys.stderr)
sys.exit(1 if failures else 0)
