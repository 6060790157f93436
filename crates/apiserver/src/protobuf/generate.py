#!/usr/bin/env python3
"""Writes schema.json: the protobuf schema of the built-in Kubernetes kinds the
API server decodes (kubectl 1.32+ sends its generators' objects as protobuf).

The facts come from two crates Modelplane already builds with, so the schema is
the Kubernetes types' own and needs no network:
  - k8s-pb (prost code generated from Kubernetes' .proto files): every message,
    its fields' numbers, wire types and message types;
  - k8s-openapi (generated from Kubernetes' OpenAPI): each field's JSON name, and
    whether the field is required (a required field keeps its zero value in
    JSON; an optional one is left out when empty, as Go's omitempty does).

  - pointers.txt (beside this script): the scalar fields the Go types declare
    as pointers (`*int32`, `*bool`, `*string`, …), one `package Message
    jsonName` a line, read off the Kubernetes Go types. Go writes a pointer
    field to protobuf only when it is set, so its zero value was sent and is
    kept; a non-pointer optional field is always written and its zero means
    unset (omitempty).

Usage (from the repository's root, after `cargo fetch`):
  python3 crates/apiserver/src/protobuf/generate.py \
      ~/.cargo/registry/src/*/k8s-pb-0.9.0 \
      ~/.cargo/registry/src/*/k8s-openapi-0.29.0 v1_35 \
      crates/apiserver/src/protobuf/pointers.txt \
      > crates/apiserver/src/protobuf/schema.json

Output: {"package.Message": [[number, json name, type, label, keep zero, list type], ...]}
where type is a scalar ("string", "int32", "int64", "bool", "double", "bytes")
or a message's full name, label is "" (optional), "repeated", "map" (string
keys; type is the value's) or "inline" (an embedded struct whose fields are
the parent's in JSON), keep zero says a zero value is written, and list type
is how server-side apply merges a repeated field: "atomic", "set", or "map:"
and its key fields (from k8s-openapi's DeepMerge), or "" when not a list.
"""

import json
import os
import re
import sys

# The API groups whose kinds the server serves, and what they are built from.
PACKAGES = [
    "api/apps/v1",
    "api/autoscaling/v1",
    "api/autoscaling/v2",
    "api/batch/v1",
    "api/coordination/v1",
    "api/core/v1",
    "api/discovery/v1",
    "api/events/v1",
    "api/networking/v1",
    "api/policy/v1",
    "api/rbac/v1",
    "api/resource/v1",
    "api/scheduling/v1",
    "api/storage/v1",
    "apimachinery/pkg/api/resource",
    "apimachinery/pkg/apis/meta/v1",
    "apimachinery/pkg/runtime",
    "apimachinery/pkg/util/intstr",
]

SCALARS = {"string", "int32", "int64", "bool", "double", "bytes"}

FIELD = re.compile(r"#\[prost\((?P<attr>[^\]]*)\)\]\s*pub (?P<name>(?:r#)?\w+):\s*(?P<ty>[^;]*?),\s*$")


def package_of(module):
    return "k8s.io." + module.replace("/", ".")


def resolve(module, rust_type):
    """The full message name of a Rust type path seen in `module`."""
    inner = rust_type
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<"):
        if inner.startswith(wrapper):
            inner = inner[len(wrapper) : -1]
    if "BTreeMap<" in inner:
        inner = inner.split(",", 1)[1].strip().rstrip(",").strip()[:-1].strip().rstrip(",")
    parts = module.split("/")
    path = inner.split("::")
    while path and path[0] == "super":
        parts.pop()
        path.pop(0)
    return package_of("/".join(parts + path[:-1])) + "." + path[-1]


def messages(k8s_pb, module):
    """(message, [(number, rust name, type, label, doc)]) of one k8s-pb module."""
    text = open(os.path.join(k8s_pb, "src", module, "mod.rs")).read()
    for struct in re.finditer(r"pub struct (\w+) \{(?:\}|(.*?)\n\})", text, re.S):
        name, body = struct.group(1), struct.group(2) or ""
        fields = []
        doc = []
        # A field's declaration may wrap over several lines: join them.
        lines = []
        for line in body.split("\n"):
            stripped = line.strip()
            last = lines[-1] if lines else ""
            open_brackets = last.count("<") - last.count(">")
            if last.startswith("pub ") and (open_brackets > 0 or not last.endswith(",")):
                lines[-1] += " " + stripped
            else:
                lines.append(stripped)
        for stripped in lines:
            if stripped.startswith("///"):
                doc.append(stripped)
                continue
            if stripped.startswith("#[prost("):
                pending = stripped
                continue
            if stripped.startswith("pub "):
                match = FIELD.match(pending + " " + stripped)
                if not match:
                    sys.exit(f"unparsed field in {module} {name}: {stripped}")
                attr = match.group("attr")
                number = int(re.search(r'tag = "(\d+)"', attr).group(1))
                kind = attr.split(",")[0].split("=")[0].strip()
                label = "repeated" if "repeated" in attr else ""
                if kind == "btree_map":
                    kind = re.search(r'btree_map = "string, (\w+)"', attr).group(1)
                    label = "map"
                if kind == "message":
                    kind = resolve(module, match.group("ty"))
                elif kind not in SCALARS:
                    sys.exit(f"unknown prost type {kind} in {module} {name}")
                rust = match.group("name").removeprefix("r#")
                fields.append((number, rust, kind, label, "\n".join(doc)))
                doc = []
        yield name, fields


def json_names(k8s_openapi, version, module):
    """lowercased type name → {rust field: (json name, required)} from k8s-openapi."""
    directory = os.path.join(k8s_openapi, "src", version, module)
    types = {}
    if not os.path.isdir(directory):
        return types
    for file in os.listdir(directory):
        if not file.endswith(".rs") or file == "mod.rs":
            continue
        text = open(os.path.join(directory, file)).read()
        struct = re.search(r"pub struct (\w+) \{(.*?)\n\}", text, re.S)
        if not struct:
            continue
        required = {
            m.group(1): not m.group(2).startswith("Option<")
            for m in re.finditer(r"^    pub (\w+): (.*),$", struct.group(2), re.M)
        }
        keys = re.findall(r'"([^"]+)" => Field::Key_(\w+),', text)
        lists = list_strategies(text)
        types[struct.group(1).lower()] = {
            same(rust): (json_name, required.get(rust, False), lists.get(rust, ""))
            for json_name, rust in keys
        }
    return types


def list_strategies(text):
    """rust field → how server-side apply merges the list, from k8s-openapi's
    DeepMerge: "atomic", "set", or "map:" and the Rust names of its keys
    (turned into JSON names once the item's fields are known)."""
    out = {}
    for m in re.finditer(r"merge_strategies::list::(atomic|set|map)\(\s*&mut self\.(\w+),", text):
        strategy, field = m.group(1), m.group(2)
        if strategy == "map":
            keys_text = text[m.end():text.index("|current_item", m.end())]
            keys = re.findall(r"lhs\.(\w+) ==", keys_text)
            strategy = "map:" + ",".join(keys)
        out[field] = strategy
    return out


def same(rust):
    """A Rust field name as both crates would spell it: they split acronyms
    differently (`pod_cid_rs`, `pod_cidrs`) and k8s-openapi suffixes keywords
    (`type_`)."""
    return rust.replace("_", "").lower()


def lower_camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def main():
    k8s_pb, k8s_openapi, version, pointers_file = sys.argv[1:5]
    # Go and prost spell acronyms differently (HPAScalingRules, HpaScalingRules).
    pointers = {
        (package, message.lower(), field)
        for package, message, field in (line.split() for line in open(pointers_file) if line.strip())
    }
    schema = {}
    guessed = []
    for module in PACKAGES:
        names = json_names(k8s_openapi, version, module)
        for message, fields in messages(k8s_pb, module):
            known = names.get(message.lower(), {})
            rows = []
            for number, rust, kind, label, doc in fields:
                list_type = ""
                if same(rust) in known:
                    json_name, required, list_type = known[same(rust)]
                elif known and kind not in SCALARS and label == "":
                    # A Go struct embedded with `json:",inline"`: a field of
                    # its own in protobuf, its fields the parent's in JSON.
                    rows.append([number, "", kind, "inline", False, ""])
                    continue
                else:
                    json_name = lower_camel(rust)
                    required = "+optional" not in doc
                    if known:
                        guessed.append(f"{message}.{rust}")
                pointer = (package_of(module), message.lower(), json_name) in pointers
                keep_zero = (required or pointer) and label == "" and kind in SCALARS
                rows.append([number, json_name, kind, label, keep_zero, list_type])
            schema[package_of(module) + "." + message] = sorted(rows)
    # A list map's keys are fields of its items: their JSON names.
    for rows in schema.values():
        for row in rows:
            if row[5].startswith("map:"):
                item = {same(r[1]): r[1] for r in schema.get(row[2], [])}
                keys = [item.get(same(k), lower_camel(k)) for k in row[5][4:].split(",")]
                row[5] = "map:" + ",".join(keys)
    for name in guessed:
        print(f"note: no JSON name in k8s-openapi for {name}; guessed", file=sys.stderr)
    json.dump(schema, sys.stdout, indent=None, separators=(",", ":"), sort_keys=True)
    print()


if __name__ == "__main__":
    main()
