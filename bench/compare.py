#!/usr/bin/env python3
"""meganeura beside eager and compiled PyTorch: one markdown table, with the correctness gates.

  compare.py ROOT_OR_CELL_DIR... [--json FILE] [--check]

Every folder holding a meganeura.json is a cell (one model at one precision), as `meganeura bench`
and bench/torch_bench.py leave it. The table has one row per cell and workload: meganeura's median
wall time (and GPU time), PyTorch eager's and torch.compile's median wall times, and their ratios
(PyTorch ms / meganeura ms: above 1 means meganeura is faster). The gates column, on each cell's first
row, compares meganeura's outputs.safetensors with reference.safetensors (PyTorch eager in float64,
from the same float32 weights and inputs):

  forward   relative L2 of the inference output                      < 1%
  grad      relative L2 of all gradients together                    < 5%
  worst     the largest per-parameter gradient relative L2, named    < 5%

where the relative L2 of x against the reference r is ||x - r|| / ||r||. That bounds the error of
the gradient norm, | ||x|| - ||r|| | / ||r||, from above, and also catches a gradient of the right
size pointing the wrong way; the norm errors are reported in the JSON as well. Below the table:
compile times, dispatches, memory, the binary's size, and for every workload where meganeura is
slower than PyTorch the kernels that take its GPU time.

--json FILE writes the numbers and gate results; --check exits 1 when a gate fails or cannot be
evaluated (a missing file or tensor).
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
TORCH_MODES = ["eager", "compile"]


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
    mn = load_json(os.path.join(cell_dir, "meganeura.json"))
    cell = {"dir": cell_dir, "model": mn.get("model", "?"), "precision": mn.get("precision", "?"),
            "size": mn.get("size", "?"), "meganeura": mn}
    for mode in TORCH_MODES:
        cell[mode] = load_json(os.path.join(cell_dir, f"torch-{mode}.json"))
    reference_path = os.path.join(cell_dir, "reference.safetensors")
    if not os.path.exists(reference_path):
        cell["gates"] = {"pass": False, "problems": ["no reference.safetensors (run torch_bench.py --mode eager)"]}
        cell["torch_gates"] = {}
        return cell
    reference = read_safetensors(reference_path)
    cell["gates"] = evaluate_gates(read_safetensors(os.path.join(cell_dir, "outputs.safetensors")), reference)
    cell["torch_gates"] = {}
    for mode in TORCH_MODES:
        path = os.path.join(cell_dir, f"outputs-torch-{mode}.safetensors")
        if os.path.exists(path):
            cell["torch_gates"][mode] = evaluate_gates(read_safetensors(path), reference)
    return cell


def median(report, workload, key="wall_ms"):
    try:
        return report["workloads"][workload][key]["median"]
    except (KeyError, TypeError):
        return None


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


def torch_status(report):
    if report is None:
        return "not run"
    return report.get("error")


def main_table(cells):
    lines = ["| model | precision | workload | meganeura ms | meganeura GPU ms | eager ms | compiled ms "
             "| eager ÷ mn | compiled ÷ mn | gates |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in cells:
        for i, w in enumerate(WORKLOADS):
            mn = median(c["meganeura"], w)
            eager, comp = median(c["eager"], w), median(c["compile"], w)
            gates = gate_text(c["gates"]) if i == 0 else ""
            lines.append(f"| {c['model']} | {c['precision']} | {w} | {ms(mn)} | {ms(median(c['meganeura'], w, 'gpu_ms'))} "
                         f"| {ms(eager)} | {ms(comp)} | {ratio(eager, mn)} | {ratio(comp, mn)} | {gates} |")
    return "\n".join(lines)


def mib(v):
    return "—" if v is None else f"{v / 2**20:.1f}"


def details(cells):
    lines = ["| model | precision | compile cold / warm ms (inference; step) | torch.compile cold / warm ms "
             "(inference; step) | dispatches / barriers (inf, lat, train, step) | arena / logical MiB (train) "
             "| peak MiB mn / eager / compiled | binary MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for c in cells:
        r = c["meganeura"]
        comp = r.get("compile", {})
        ct = "; ".join(f"{ms(comp.get(k, {}).get('cold_ms'))} / {ms(comp.get(k, {}).get('warm_ms'))}"
                       for k in ("inference", "step"))
        tc = (c["compile"] or {}).get("compile") or {}
        tct = "; ".join(f"{ms((tc.get(k) or {}).get('cold_ms'))} / {ms((tc.get(k) or {}).get('warm_ms'))}"
                        for k in ("inference", "step")) if tc else "—"
        wl = r.get("workloads", {})
        db = ", ".join(f"{wl[w]['dispatches']}/{wl[w]['barriers']}" for w in WORKLOADS if w in wl)
        train = wl.get("training", {})
        peaks = " / ".join(mib((x or {}).get("peak_device_bytes")) for x in (r, c["eager"], c["compile"]))
        lines.append(f"| {c['model']} | {c['precision']} | {ct} | {tct} | {db} | "
                     f"{mib(train.get('physical_bytes'))} / {mib(train.get('logical_bytes'))} | {peaks} | "
                     f"{mib(r.get('binary_bytes'))} |")
    return "\n".join(lines)


def slow_kernels(cells):
    lines = []
    for c in cells:
        for w in WORKLOADS:
            mn = median(c["meganeura"], w)
            fastest = min((t for t in (median(c["eager"], w), median(c["compile"], w)) if t is not None), default=None)
            if mn is None or fastest is None or mn <= fastest:
                continue
            top = c["meganeura"]["workloads"][w].get("top_kernels") or []
            kernels = ", ".join(f"{k['label']} {k['ms']:.3f} ms ×{k['dispatches']}" for k in top[:5]) or "no timestamps"
            lines.append(f"- {c['model']} {c['precision']} {w}: {ms(mn)} ms vs {ms(fastest)} ms; GPU time in {kernels}")
    return "\n".join(lines) or "- none: meganeura is at least as fast as PyTorch in every measured workload"


def notes(cells):
    lines = []
    for c in cells:
        for mode in TORCH_MODES:
            status = torch_status(c[mode])
            if status:
                lines.append(f"- {c['model']} {c['precision']} PyTorch {mode}: {status}")
            for n in (c[mode] or {}).get("notes", []):
                lines.append(f"- {c['model']} {c['precision']} PyTorch {mode}: {n}")
        for n in c["meganeura"].get("notes", []):
            lines.append(f"- {c['model']} {c['precision']} meganeura: {n}")
        if c["gates"].get("ungated"):
            lines.append(f"- {c['model']} {c['precision']}: gradients without a PyTorch reference, not gated: "
                         f"{', '.join(c['gates']['ungated'][:8])}")
        for mode, g in c["torch_gates"].items():
            if mode == "eager" and c["precision"] == "strict":
                continue  # the reference itself
            lines.append(f"- {c['model']} {c['precision']} PyTorch {mode} against the reference: {gate_text(g)}")
    return "\n".join(lines)


def report_markdown(cells):
    parts = [main_table(cells), "", "Ratios are PyTorch ms ÷ meganeura ms (wall clock, median); above 1× "
             "meganeura is faster. Gates: meganeura against PyTorch eager in float64 on the same weights and inputs, relative L2; "
             "limits forward 1%, gradients 5%.", "", "### Details", "", details(cells), "",
             "### Where meganeura is slower, its GPU time by kernel", "", slow_kernels(cells)]
    extra = notes(cells)
    if extra:
        parts += ["", "### Notes", "", extra]
    return "\n".join(parts)


def summary_json(cells):
    out = []
    for c in cells:
        out.append({"model": c["model"], "precision": c["precision"], "size": c["size"], "dir": c["dir"],
                    "gates": c["gates"], "torch_gates": c["torch_gates"],
                    "wall_ms": {w: {"meganeura": median(c["meganeura"], w), "eager": median(c["eager"], w),
                                    "compile": median(c["compile"], w)} for w in WORKLOADS}})
    return {"cells": out, "all_gates_pass": bool(cells) and all(c["gates"]["pass"] for c in cells)}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="a results folder of cells, or cell folders")
    ap.add_argument("--json", help="write the numbers and gate results here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a gate fails or cannot be evaluated")
    args = ap.parse_args(argv)
    dirs = find_cells(args.paths)
    # The gates read every cell's outputs (gigabytes for SmolLM2): the cells are evaluated in parallel.
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, min(len(dirs), os.cpu_count() or 1))) as pool:
        cells = list(pool.map(load_cell, dirs))
    if not cells:
        print(f"compare.py: no meganeura.json under {', '.join(args.paths)}", file=sys.stderr)
        return 2
    print(report_markdown(cells))
    result = summary_json(cells)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=lambda v: None)
    return 1 if args.check and not result["all_gates_pass"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
