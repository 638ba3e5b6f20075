#!/usr/bin/env python3
"""CPU seconds to compile each translation unit of a build, worst first.

    cmake -S . -B build -DCMAKE_EXPORT_COMPILE_COMMANDS=ON ...
    python3 benchmarks/compile_times.py build [--filter REGEX] [--jobs N] [--json OUT]

Runs every command of build/compile_commands.json again (into a scratch
object file, so the build is left alone) and reports the user + system CPU
time of the compiler process, which is steadier than wall time on a shared
machine. The total divided by the cores is the build's lower bound; the
README's build-time figures were measured with this script next to a timed
`cmake --build`.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def compile_one(entry, scratch):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = os.path.join(scratch, f"{abs(hash(entry['file']))}.o")
    fixed, skip = [], False
    for a in args:
        if skip:
            fixed.append(out)
            skip = False
        elif a == "-o":
            fixed.append(a)
            skip = True
        else:
            fixed.append(a)
    # Bypass a compiler launcher (ccache) so that every file is really compiled.
    if os.path.basename(fixed[0]) == "ccache":
        fixed = fixed[1:]
    start = time.monotonic()
    proc = subprocess.Popen(fixed, cwd=entry["directory"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.stderr.write(f"compile failed: {entry['file']}\n{err}\n")
    return entry["file"], usage.ru_utime + usage.ru_stime, wall, proc.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", help="build folder with compile_commands.json")
    parser.add_argument("--filter", default="", help="only files whose path matches this regex")
    parser.add_argument("--jobs", type=int, default=1, help="compilers at once (1: steadiest figures)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    opts = parser.parse_args()
    with open(os.path.join(opts.build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if re.search(opts.filter, e["file"])]
    root = os.path.commonpath([e["file"] for e in entries]) if entries else ""
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(opts.jobs) as pool:
        rows = list(pool.map(lambda e: compile_one(e, scratch), entries))
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    for name, cpu, wall, rc in rows:
        print(f"{cpu:7.1f} s  {os.path.relpath(name, root):60s}{'  FAILED' if rc else ''}")
    print(f"{total:7.1f} s  total CPU over {len(rows)} translation units "
          f"({total / max(len(rows), 1):.1f} s each on average; {total / (os.cpu_count() or 1):.0f} s "
          f"on {os.cpu_count()} cores at best)")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump([{"file": n, "cpu_s": c, "wall_s": w} for n, c, w, _ in rows], f, indent=1)
    return 1 if any(r[3] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
