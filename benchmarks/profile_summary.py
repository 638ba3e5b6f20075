#!/usr/bin/env python3
"""Sums a Chrome trace of torch's legacy profiler (bench_train_step --profile)
per op: self time (the op's time minus the ops it called), total time, calls.

  python3 benchmarks/profile_summary.py TRACE.json [--top 30]

Plain python3 (no modules beyond the standard library)."""
import argparse
import collections
import json


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    events = [e for e in json.load(open(args.trace)) if e.get("ph") == "X"]
    self_us = collections.Counter()
    total_us = collections.Counter()
    calls = collections.Counter()
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e.get("tid")].append(e)
    wall_us = 0.0
    for tid, items in by_thread.items():
        # Nesting on one thread: an op started inside another's interval is its child.
        items.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in items:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack:
                self_us[stack[-1][0]] -= e["dur"]
            else:
                wall_us += e["dur"]
            name = e["name"]
            self_us[name] += e["dur"]
            if not any(s[0] == name for s in stack):  # recursion counted once in total
                total_us[name] += e["dur"]
            calls[name] += 1
            stack.append((name, end))
    print(f"# {args.trace}: {len(events)} ops on {len(by_thread)} thread(s), top-level time {wall_us / 1e3:.1f} ms")
    print(f"{'op':<44} {'self_ms':>9} {'self_%':>7} {'total_ms':>9} {'calls':>7}")
    for name, us in self_us.most_common(args.top):
        print(f"{name:<44} {us / 1e3:9.1f} {100 * us / wall_us:6.1f}% {total_us[name] / 1e3:9.1f} {calls[name]:7d}")


if __name__ == "__main__":
    main()
