#!/usr/bin/env python3
"""meganeura beside three PyTorch configurations and the chip's floor: one record per workload, a
markdown table generated from them, and the correctness gates.

  compare.py ROOT_OR_CELL_DIR... [--json FILE] [--meta KEY=VALUE]... [--check]
  compare.py --render FILE... [--json MERGED]

Every folder holding a meganeura.json is a cell (one model at one precision), as `meganeura bench`
and bench/torch_bench.py leave it. Each cell gives one record per workload (inference, latency,
training, step): meganeura's median wall time (and GPU time); the median wall times of PyTorch eager,
torch.compile (default mode) and torch.compile(mode="reduce-overhead") (CUDA graphs); the fastest of
the three, the reference, named; and the floor, max(product FLOPs / peak, bytes / bandwidth) from the
counts `meganeura bench` takes of the graph (src/bench/floor.hpp) and the H200 peaks in PEAKS. The
headline ratio is the fastest PyTorch's ms / meganeura's ms (above 1: meganeura is faster). A time
that was not measured, or that an earlier run left behind (a PyTorch report written for another
meganeura run of the cell), is null and the record's notes say why. The gates, on each cell's first
row, compare meganeura's outputs.safetensors with reference.safetensors (PyTorch eager in float64,
from the same float32 weights and inputs):

  forward   relative L2 of the inference output                      < 1%
  grad      relative L2 of all gradients together                    < 5%
  worst     the largest per-parameter gradient relative L2, named    < 5%

where the relative L2 of x against the reference r is ||x - r|| / ||r||. That bounds the error of
the gradient norm, | ||x|| - ||r|| | / ||r||, from above, and also catches a gradient of the right
size pointing the wrong way; the norm errors are reported in the JSON as well. Below the table:
compile times, dispatches, memory, the binary's size, and for every workload where meganeura is
slower than the fastest PyTorch the kernels that take its GPU time.

--json FILE writes the records, the cells' gates and details and --meta's pairs (run_gpu.sh: commit,
command, ...); the markdown printed is rendered from exactly that, and --render prints it again from
a stored FILE (of several, each cell from the last that has it, merged into --json). A workload
counts in the headline only when meganeura and all three PyTorch configurations ran. --check exits 1
when a gate fails or cannot be evaluated (a missing file or tensor).
"""
import argparse
import concurrent.futures
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))

from safetensors_io import read_safetensors  # noqa: E402

GATES = {"forward": 0.01, "grad": 0.05, "worst": 0.05}
WORKLOADS = ["inference", "latency", "training", "step"]
MODEL_ORDER = ["smollm2", "smolvla", "sd_unet", "resnet50", "whisper"]
TORCH_MODES = ["eager", "compile", "cudagraphs"]
SCHEMA = "meganeura-results/1"
# The H200's measured peaks (../shared/DEVICE.md): cuBLAS 8192³ matmuls in f32 (strict's products)
# and f16 (fast's), and a 1 GiB device copy.
PEAKS = {"device": "NVIDIA H200", "strict_flops": 51e12, "fast_flops": 743e12, "bytes_per_s": 4.0e12}


def rel_l2(x, r):
    x = np.asarray(x, dtype=np.float64).ravel()
    r = np.asarray(r, dtype=np.float64).ravel()
    if x.shape != r.shape:
        return math.inf
    diff, ref = np.linalg.norm(x - r), np.linalg.norm(r)
    if ref == 0:
        return 0.0 if diff == 0 else math.inf
    return float(diff / ref)


def norm_error(x, r):
    ref = np.linalg.norm(np.asarray(r, dtype=np.float64))
    got = np.linalg.norm(np.asarray(x, dtype=np.float64))
    return float(abs(got - ref) / ref) if ref else (0.0 if got == 0 else math.inf)


def evaluate_gates(outputs, reference):
    """The three gates of `outputs` against `reference` (dicts of arrays); problems lists what is missing."""
    problems = []
    for key in ("output", "loss"):
        if key not in outputs or key not in reference:
            problems.append(f"no '{key}' in both files")
    grads = sorted(k for k in reference if k.startswith("grad."))
    if not grads:
        problems.append("the reference has no gradients")
    problems += [f"meganeura has no {k}" for k in grads if k not in outputs]
    forward = rel_l2(outputs["output"], reference["output"]) if "output" in outputs and "output" in reference else math.inf
    per = {k[len("grad."):]: rel_l2(outputs[k], reference[k]) if k in outputs else math.inf for k in grads}
    both = [k for k in grads if k in outputs]
    flat = lambda d: np.concatenate([np.asarray(d[k], dtype=np.float64).ravel() for k in both]) if both else np.zeros(0)
    total = rel_l2(flat(outputs), flat(reference)) if both and len(both) == len(grads) else math.inf
    worst = max(per, key=lambda k: per[k]) if per else None
    values = {"forward": forward, "grad": total, "worst": per[worst] if worst else math.inf}
    passed = {k: bool(values[k] < GATES[k]) for k in GATES}  # NaN and inf fail
    return {
        "values": values, "limits": GATES, "passed": passed, "pass": all(passed.values()) and not problems,
        "worst_parameter": worst, "per_parameter": per, "problems": problems,
        # e.g. batch-norm running statistics: parameters to meganeura, buffers without gradients to PyTorch
        "ungated": sorted(k[len("grad."):] for k in outputs if k.startswith("grad.") and k not in reference),
        "loss_relative_difference": rel_l2(outputs["loss"], reference["loss"]) if not problems else None,
        "grad_norm_error": norm_error(flat(outputs), flat(reference)) if both and len(both) == len(grads) else None,
        "worst_parameter_norm_error": max((norm_error(outputs["grad." + k], reference["grad." + k])
                                           for k in per if "grad." + k in outputs), default=None),
    }


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def find_cells(paths):
    cells = []
    for path in paths:
        if os.path.exists(os.path.join(path, "meganeura.json")):
            cells.append(path)
            continue
        for name in sorted(os.listdir(path)):
            if os.path.exists(os.path.join(path, name, "meganeura.json")):
                cells.append(os.path.join(path, name))
    def order(d):  # the protocol's model order, strict before fast
        r = load_json(os.path.join(d, "meganeura.json")) or {}
        model = r.get("model", "")
        rank = MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER)
        precision = {"strict": 0, "fast": 1}.get(r.get("precision"), 2)
        return (rank, model, precision, d)
    return sorted(cells, key=order)


def load_cell(cell_dir):
    """A cell's reports (a PyTorch report that failed, or that was written for an earlier meganeura run
    of this folder, is None with a note) and its gates."""
    mn = load_json(os.path.join(cell_dir, "meganeura.json"))
    cell = {"dir": cell_dir, "model": mn.get("model", "?"), "precision": mn.get("precision", "?"),
            "size": mn.get("size", "?"), "meganeura": mn, "missing": {}, "torch_notes": {}}
    for mode in TORCH_MODES:
        report = load_json(os.path.join(cell_dir, f"torch-{mode}.json"))
        if report is None:
            cell["missing"][mode] = f"PyTorch {mode} did not run"
        elif report.get("cell_started_at") != mn.get("started_at"):
            cell["missing"][mode] = f"PyTorch {mode}: its report is of an earlier run, ignored"
            report = None
        elif report.get("error"):
            cell["missing"][mode] = f"PyTorch {mode}: {report['error']}"
        cell[mode] = report
        cell["torch_notes"][mode] = (report or {}).get("notes", [])
    reference_path = os.path.join(cell_dir, "reference.safetensors")
    cell["torch_gates"] = {}
    if not os.path.exists(reference_path) or "eager" in cell["missing"]:
        cell["gates"] = {"pass": False, "problems": ["no reference.safetensors of this run (run torch_bench.py --mode eager)"]}
        return cell
    reference = read_safetensors(reference_path)
    cell["gates"] = evaluate_gates(read_safetensors(os.path.join(cell_dir, "outputs.safetensors")), reference)
    for mode in TORCH_MODES:
        path = os.path.join(cell_dir, f"outputs-torch-{mode}.safetensors")
        if mode not in cell["missing"] and os.path.exists(path):
            cell["torch_gates"][mode] = evaluate_gates(read_safetensors(path), reference)
    return cell


def median(report, workload, key="wall_ms"):
    try:
        return report["workloads"][workload][key]["median"]
    except (KeyError, TypeError):
        return None


def floor_ms(floor, precision):
    """max(product FLOPs / peak, bytes / bandwidth) in ms, with the peak of the cell's precision."""
    if not floor:
        return None
    peak = PEAKS["fast_flops" if precision == "fast" else "strict_flops"]
    return 1e3 * max(floor["product_flops"] / peak, floor["bytes"] / PEAKS["bytes_per_s"])


def record(c, w):
    """One model x precision x workload."""
    mn = c["meganeura"]
    wl = (mn.get("workloads") or {}).get(w)
    notes = [] if wl else [f"meganeura did not run {w}"]
    rec = {"model": c["model"], "precision": c["precision"], "workload": w,
           "meganeura_ms": median(mn, w), "meganeura_gpu_ms": median(mn, w, "gpu_ms")}
    for mode in TORCH_MODES:
        rec[f"{mode}_ms"] = median(c[mode], w)
        if rec[f"{mode}_ms"] is None:
            notes.append(c["missing"].get(mode, f"PyTorch {mode} did not run {w}"))
    timed = {m: rec[f"{m}_ms"] for m in TORCH_MODES if rec[f"{m}_ms"] is not None}
    rec["best_torch"] = min(timed, key=timed.get) if timed else None
    rec["best_torch_ms"] = timed.get(rec["best_torch"])
    floor = (wl or {}).get("floor")
    rec["floor_ms"] = floor_ms(floor, c["precision"])
    rec["floor"] = floor
    rec["floor_fraction"] = rec["floor_ms"] / rec["meganeura_ms"] if rec["floor_ms"] and rec["meganeura_ms"] else None
    rec["dispatches"] = (wl or {}).get("dispatches")
    rec["barriers"] = (wl or {}).get("barriers")
    program = ((mn.get("compile") or {}).get("inference" if w in ("inference", "latency") else "step")) or {}
    rec["compile_cold_ms"], rec["compile_warm_ms"] = program.get("cold_ms"), program.get("warm_ms")
    g = c["gates"]
    rec["gates_pass"] = g["pass"]
    for k in GATES:
        rec[f"gate_{k}"] = (g.get("values") or {}).get(k)
    rec["gate_worst_parameter"] = g.get("worst_parameter")
    rec["top_kernels"] = ((wl or {}).get("top_kernels") or [])[:5]
    rec["notes"] = notes
    return rec


def cell_summary(c):
    """What the records leave out: the full gates and the details table's numbers."""
    mn = c["meganeura"]
    train = (mn.get("workloads") or {}).get("training") or {}
    notes = []
    for mode in TORCH_MODES:
        notes += [f"PyTorch {mode}: {n}" for n in c["torch_notes"][mode]]
    notes += [f"meganeura: {n}" for n in mn.get("notes", [])]
    if c["gates"].get("ungated"):
        notes.append(f"gradients without a PyTorch reference, not gated: {', '.join(c['gates']['ungated'][:8])}")
    return {"model": c["model"], "precision": c["precision"], "size": c["size"], "dir": c["dir"],
            "gates": c["gates"], "torch_gates": c["torch_gates"], "missing": c["missing"],
            "compile_ms": {"meganeura": mn.get("compile")} | {m: (c[m] or {}).get("compile") for m in TORCH_MODES},
            "peak_device_bytes": {"meganeura": mn.get("peak_device_bytes")} |
                                 {m: (c[m] or {}).get("peak_device_bytes") for m in TORCH_MODES},
            "arena_bytes": train.get("physical_bytes"), "logical_bytes": train.get("logical_bytes"),
            "binary_bytes": mn.get("binary_bytes"), "notes": notes}


def summarize(cells, meta):
    return {"schema": SCHEMA, "meta": meta, "peaks": PEAKS,
            "records": [record(c, w) for c in cells for w in WORKLOADS],
            "cells": [cell_summary(c) for c in cells],
            "all_gates_pass": bool(cells) and all(c["gates"]["pass"] for c in cells)}


def merged(summaries):
    """Several runs' summaries as one: each model x precision from the last run that has it."""
    key = lambda x: (x["model"], x["precision"])
    cells, records = {}, {}
    for s in summaries:
        for c in s["cells"]:
            cells[key(c)] = c
            records[key(c)] = [r for r in s["records"] if key(r) == key(c)]
    return {"schema": SCHEMA, "meta": {"runs": [s["meta"] for s in summaries]}, "peaks": summaries[-1]["peaks"],
            "records": [r for k in cells for r in records[k]], "cells": list(cells.values()),
            "all_gates_pass": all(c["gates"]["pass"] for c in cells.values())}


# --- the markdown, from the summary alone ---

def ms(v):
    return "—" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def ratio(torch_ms, mn_ms):
    return "—" if torch_ms is None or not mn_ms else f"{torch_ms / mn_ms:.2f}×"


def gate_text(g):
    if g.get("problems"):
        return "✗ " + "; ".join(g["problems"][:3])
    v, p = g["values"], g["passed"]
    mark = lambda k: "✓" if p[k] else "✗"
    return (f"{'pass' if g['pass'] else 'FAIL'}: fwd {v['forward']:.1e} {mark('forward')} · "
            f"grad {v['grad']:.1e} {mark('grad')} · worst {g['worst_parameter']} {v['worst']:.1e} {mark('worst')}")


def compared(records):
    """The workloads that count: meganeura and PyTorch's CUDA graphs (its fastest configuration) timed. Without
    them the "fastest PyTorch" may be eager only (SmolLM2's compiled processes once ran out of time), which
    flatters; default torch.compile may be left out (run_gpu.sh --torch-compiled cudagraphs)."""
    return [r for r in records if r["meganeura_ms"] is not None and r["cudagraphs_ms"] is not None]


def headline(records):
    both = compared(records)
    ahead = [r for r in both if r["meganeura_ms"] < r["best_torch_ms"]]
    per = "; ".join(f"{p} {sum(r['precision'] == p for r in ahead)} of {sum(r['precision'] == p for r in both)}"
                    for p in ("strict", "fast") if any(r["precision"] == p for r in both))
    best = ", ".join(f"{m} in {n}" for m in TORCH_MODES if (n := sum(r["best_torch"] == m for r in both)))
    text = (f"**meganeura is ahead of the fastest PyTorch configuration in {len(ahead)} of {len(both)} workloads** "
            f"({per}). The fastest PyTorch is {best or 'none'}.")
    partial = sorted({f"{r['model']} {r['precision']}" for r in records if r not in both})
    if partial:
        text += (f" Not counted: {len(records) - len(both)} workloads where a side did not run "
                 f"({', '.join(partial)}; their fastest PyTorch is of those that ran).")
    return text


def main_table(summary):
    gates = {(c["model"], c["precision"]): gate_text(c["gates"]) for c in summary["cells"]}
    lines = ["| model | precision | workload | meganeura ms | GPU ms | eager ms | compile ms | cudagraphs ms "
             "| fastest PyTorch | fastest ÷ mn | floor ms | floor ÷ mn | gates |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in summary["records"]:
        fraction = "—" if r["floor_fraction"] is None else f"{100 * r['floor_fraction']:.2g}%"
        gate = gates.pop((r["model"], r["precision"]), "")
        lines.append(f"| {r['model']} | {r['precision']} | {r['workload']} | {ms(r['meganeura_ms'])} "
                     f"| {ms(r['meganeura_gpu_ms'])} | {ms(r['eager_ms'])} | {ms(r['compile_ms'])} "
                     f"| {ms(r['cudagraphs_ms'])} | {r['best_torch'] or '—'} | {ratio(r['best_torch_ms'], r['meganeura_ms'])} "
                     f"| {ms(r['floor_ms'])} | {fraction} | {gate} |")
    return "\n".join(lines)


def mib(v):
    return "—" if v is None else f"{v / 2**20:.1f}"


def compile_text(times):
    if not times:
        return "—"
    return "; ".join(f"{ms((times.get(k) or {}).get('cold_ms'))} / {ms((times.get(k) or {}).get('warm_ms'))}"
                     for k in ("inference", "step"))


def details(summary):
    lines = ["| model | precision | compile cold / warm ms (inference; step): meganeura | compile | cudagraphs "
             "| dispatches / barriers (inf, lat, train, step) | floor GFLOP / MB (inf, train, step) "
             "| arena / logical MiB (train) | peak MiB mn / eager / compile / cudagraphs | binary MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for c in summary["cells"]:
        records = {r["workload"]: r for r in summary["records"] if (r["model"], r["precision"]) == (c["model"], c["precision"])}
        db = ", ".join(f"{r['dispatches']}/{r['barriers']}" for r in records.values())
        fl = ", ".join(f"{r['floor']['product_flops'] / 1e9:.1f} / {r['floor']['bytes'] / 1e6:.0f}"
                       for w, r in records.items() if w != "latency" and r["floor"])
        compiles = " | ".join(compile_text(c["compile_ms"][k]) for k in ["meganeura", "compile", "cudagraphs"])
        peaks = " / ".join(mib(c["peak_device_bytes"][k]) for k in ["meganeura"] + TORCH_MODES)
        lines.append(f"| {c['model']} | {c['precision']} | {compiles} | {db} | {fl} | "
                     f"{mib(c['arena_bytes'])} / {mib(c['logical_bytes'])} | {peaks} | {mib(c['binary_bytes'])} |")
    return "\n".join(lines)


def slow_kernels(summary):
    lines = []
    for r in compared(summary["records"]):
        if r["meganeura_ms"] <= r["best_torch_ms"]:
            continue
        kernels = ", ".join(f"{k['label']} {k['ms']:.3f} ms ×{k['dispatches']}" for k in r["top_kernels"]) or "no timestamps"
        lines.append(f"- {r['model']} {r['precision']} {r['workload']}: {ms(r['meganeura_ms'])} ms vs "
                     f"{r['best_torch']} {ms(r['best_torch_ms'])} ms; GPU time in {kernels}")
    return "\n".join(lines) or "- none: meganeura is at least as fast as the fastest PyTorch in every measured workload"


def notes(summary):
    lines = []
    for c in summary["cells"]:
        name = f"{c['model']} {c['precision']}"
        lines += [f"- {name}: {n}" for n in c["missing"].values()]
        lines += [f"- {name} {n}" for n in c["notes"]]
        for mode, g in c["torch_gates"].items():
            if mode == "eager" and c["precision"] == "strict":
                continue  # the reference itself
            lines.append(f"- {name} PyTorch {mode} against the reference: {gate_text(g)}")
    return "\n".join(lines)


def render(summary):
    p = summary["peaks"]
    parts = [headline(summary["records"]), "", main_table(summary), "",
             "Times are wall clock, median. The fastest PyTorch is the fastest of eager, torch.compile and "
             "torch.compile(mode=\"reduce-overhead\") (cudagraphs) in that workload; fastest ÷ mn above 1× means "
             "meganeura is faster. Floor: max(product FLOPs / peak, bytes / bandwidth) with the "
             f"{p['device']}'s measured {p['strict_flops'] / 1e12:.0f} TFLOP/s (strict, f32) or "
             f"{p['fast_flops'] / 1e12:.0f} TFLOP/s (fast, f16) and {p['bytes_per_s'] / 1e12:.1f} TB/s, counted as "
             "bench/README.md says; floor ÷ mn is the fraction of the chip meganeura reaches. Gates: meganeura "
             "against PyTorch eager in float64 on the same weights and inputs, relative L2; limits forward 1%, "
             "gradients 5%.", "", "### Details", "", details(summary), "",
             "### Where meganeura is slower than the fastest PyTorch, its GPU time by kernel", "", slow_kernels(summary)]
    extra = notes(summary)
    if extra:
        parts += ["", "### Notes", "", extra]
    return "\n".join(parts)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="a results folder of cells, or cell folders")
    ap.add_argument("--json", help="write the records, gates and details here")
    ap.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="recorded in the JSON's meta")
    ap.add_argument("--render", metavar="FILE", nargs="+",
                    help="print the markdown of stored --json FILEs; of several (runs of the same commit split over "
                         "calls), each cell is taken from the last that has it, and --json writes them merged")
    ap.add_argument("--check", action="store_true", help="exit 1 when a gate fails or cannot be evaluated")
    args = ap.parse_args(argv)
    if args.render:
        summaries = [load_json(f) for f in args.render]
        for f, summary in zip(args.render, summaries):
            if not summary or summary.get("schema") != SCHEMA:
                print(f"compare.py: {f} is not a {SCHEMA} file", file=sys.stderr)
                return 2
        summary = merged(summaries) if len(summaries) > 1 else summaries[0]
        if args.json:
            with open(args.json, "w") as f:
                f.write(json.dumps(summary, indent=2) + "\n")
    else:
        dirs = find_cells(args.paths)
        # The gates read every cell's outputs (gigabytes for SmolLM2): the cells are evaluated in parallel.
        with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, min(len(dirs), os.cpu_count() or 1))) as pool:
            cells = list(pool.map(load_cell, dirs))
        if not cells:
            print(f"compare.py: no meganeura.json under {', '.join(args.paths)}", file=sys.stderr)
            return 2
        summary = summarize(cells, dict(kv.split("=", 1) for kv in args.meta))
        # Through JSON and back, so that the markdown shows exactly what the file holds.
        text = json.dumps(summary, indent=2, default=lambda v: None)
        summary = json.loads(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    print(render(summary))
    return 1 if args.check and not summary["all_gates_pass"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
