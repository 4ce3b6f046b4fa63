#!/usr/bin/env python3
"""The slowest dispatches of a MEGANEURA_TRACE file, one table per session (program).

    scripts/trace_dispatches.py TRACE.json [--top N]

Each dispatch's GPU time is the median over the session's runs (a dispatch's time includes the
barrier before it: src/compiler/trace.hpp). Rows: the dispatch's index, median GPU microseconds, its
share of the run, the kernel's label, the layer and the nodes it writes (op, shape, dtype), slowest
first, then the same totals by kernel label. The tables cover the dispatches of every run; the hoisted
ones (parameter work that an inference runs once, then skips: fewer runs than the others) are counted
apart.
"""
import argparse
import collections
import json
import statistics


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    events = json.load(open(args.trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    # (track, index) -> times; the dispatch's description from its first run
    times = collections.defaultdict(list)
    described = {}
    for e in events:
        if e.get("cat") != "dispatch":
            continue
        key = (e["tid"], e["args"]["index"])
        times[key].append(e["args"]["gpu_ms"] * 1e3)
        described.setdefault(key, e)
    for tid in sorted({tid for tid, _ in times}):
        every = [(statistics.median(t), index, described[(tid, index)]) for (track, index), t in times.items() if track == tid]
        runs = max(len(times[(tid, index)]) for _, index, _ in every)
        rows = [r for r in every if len(times[(tid, r[1])]) == runs]
        hoisted = [r for r in every if len(times[(tid, r[1])]) < runs]
        total = sum(r[0] for r in rows)
        apart = f"; {len(hoisted)} hoisted dispatches, {sum(r[0] for r in hoisted):.1f} us" if hoisted else ""
        print(f"## {tracks.get(tid, tid)}: {len(rows)} dispatches, {total:.1f} us a run (median of {runs} runs each){apart}\n")
        print("| # | us | share | kernel | layer | nodes |")
        print("| ---: | ---: | ---: | --- | --- | --- |")
        for us, index, e in sorted(rows, key=lambda r: -r[0])[: args.top]:
            nodes = "; ".join(e["args"]["nodes"])
            print(f"| {index} | {us:.1f} | {100 * us / total:.1f}% | {e['args']['kernel']} | {e['name']} | {nodes} |")
        by_kernel = collections.defaultdict(lambda: [0.0, 0])
        for us, _, e in rows:
            by_kernel[e["args"]["kernel"]][0] += us
            by_kernel[e["args"]["kernel"]][1] += 1
        print("\n| kernel | us | dispatches |\n| --- | ---: | ---: |")
        for kernel, (us, count) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[: args.top]:
            print(f"| {kernel} | {us:.1f} | {count} |")
        print()


if __name__ == "__main__":
    main()
