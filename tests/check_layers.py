#!/usr/bin/env python3
"""The layer rule (docs/DESIGN.md, "Layers"): a layer includes only itself and
the layers below it, and a layer's private headers (src/<layer>/*.h) only from
that layer. Prints every include that breaks it and exits 1; exit 0 with a
count when there is none.

    python3 tests/check_layers.py <source root>
"""
import os
import re
import sys

# Bottom to top.
LAYERS = ["core", "comm", "data", "metrics", "report", "tasks", "model", "optim", "checkpoint", "parallel", "config",
          "train", "predict", "sweep", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"(?:shardtrain/)?([a-z_]+)/([^"]+)"')


def layer_of(relative):
    """src/parallel/x.cpp -> parallel; include/shardtrain/train/x.h -> train; main.cpp -> None."""
    parts = relative.split(os.sep)
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["include", "shardtrain"] and len(parts) > 3:
        return parts[2]
    return None


def main(root):
    problems, checked = [], 0
    for top in ("src", os.path.join("include", "shardtrain")):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root)
                layer = layer_of(relative)
                if layer is None:
                    continue
                if layer not in RANK:
                    problems.append(f"{relative}: folder '{layer}' is not a layer ({', '.join(LAYERS)})")
                    continue
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target, rest = match.groups()
                        if target not in RANK:
                            continue  # e.g. "support/..." in tests, CLI/CLI.hpp
                        checked += 1
                        private = not line.split('"')[1].startswith("shardtrain/")
                        if RANK[target] > RANK[layer]:
                            problems.append(f"{relative}:{number}: layer '{layer}' includes '{target}/{rest}', "
                                            f"a layer above it")
                        elif private and target != layer:
                            problems.append(f"{relative}:{number}: '{target}/{rest}' is private to src/{target}")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layer order {' < '.join(LAYERS)}")
        return 1
    print(f"check_layers: OK ({checked} includes between layers checked; {' < '.join(LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
