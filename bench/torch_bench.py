#!/usr/bin/env python3
"""The PyTorch side of the benchmark: the workloads of `meganeura bench`, on identical values.

  torch_bench.py --mode eager|compile [--repeat 20] [--warmup 3] [--device auto|cuda|cpu]
                 [--deadline UNIX_SECONDS] [--compile-only [--concurrent N]] CELL_DIR...

A cell folder is what `meganeura bench --out-dir DIR --json DIR/meganeura.json` wrote: meganeura.json
names the model, size and precision; weights.safetensors, inputs.safetensors and
inputs_latency.safetensors hold the values. For each cell this writes

  torch-<mode>.json                    the report, in meganeura's schema (bench/README.md)
  outputs-torch-<mode>.safetensors     "output", "loss", "grad.<parameter>" as this mode computed them
  reference.safetensors                (eager only) the same in float64 from the same float32 weights
                                       and inputs: the reference bench/compare.py gates every framework against

Workloads as meganeura's: inference and latency (forward + loss, no grad, full and minimal input),
training (forward + loss + backward) and step (the same plus AdamW, lr 1e-3, weight decay 1e-2, fused
on CUDA). strict = TF32 off for matmuls and convolutions, fast = TF32 on. Times: wall clock around
each run ended by torch.cuda.synchronize, and on CUDA the GPU span between two CUDA events, after
warm-up runs. In compile mode the first inference and the first training call compile their graphs:
their times are the compile times. `--mode compile --compile-only` only compiles each cell's three
graphs (inference, latency, training), filling the inductor cache, and writes their times to
torch-compile-cold.json; a later timing run reports those as cold and its own first calls as warm.
bench/run_gpu.sh runs several --compile-only processes at once to fit its time budget.
Each model comes from its twin: a module in tests/torch with NAMES, build(name, size) and
run(name, module, inputs) -> (output, loss) (see tests/torch/mlp_model.py).

A cell that fails, or that would start after --deadline, gets a report with "error" and the next
cell runs. Without torch.compile (Debian's torch 1.13) the compile mode runs eagerly and says so.
"""
import argparse
import gc
import importlib
import json
import math
import os
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))

import torch  # noqa: E402

from safetensors_io import read_safetensors, write_safetensors  # noqa: E402

SCHEMA = "meganeura-bench/1"
TWIN_MODULES = ["mlp_model", "transformer_models", "conv_models"]
COLD_FILE = "torch-compile-cold.json"  # written by --compile-only
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)  # mn::AdamW's defaults


def find_twin(name):
    problems = []
    for module_name in TWIN_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:  # not there yet, or a dependency is missing
            problems.append(f"{module_name}: {e}")
            continue
        if name in module.NAMES:
            return module
    raise RuntimeError(f"no PyTorch twin builds {name!r} (looked in {', '.join(TWIN_MODULES)}"
                       + (f"; {'; '.join(problems)}" if problems else "") + ")")


def summary(samples):
    """Median, minimum and 90th percentile (nearest rank), as the C++ harness reports them."""
    if not samples:
        return None
    s = sorted(samples)
    n = len(s)
    median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"median": median, "min": s[0], "p90": s[min(n - 1, math.ceil(0.9 * n) - 1)], "runs": n}


def set_tf32(on):
    with warnings.catch_warnings():  # newer releases prefer fp32_precision but honour these
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def load_tensors(path, device):
    return {k: torch.from_numpy(v).to(device) for k, v in read_safetensors(path).items()}


# Seconds of warm-up before timing (see `meganeura bench`, which uses the same).
WARMUP_SECONDS = 0.3


class Runner:
    """One cell's model on one device, with its four workloads as closures."""

    def __init__(self, twin, cell, cell_dir, device, compiled):
        self.cuda = device.type == "cuda"
        self.notes = []
        module = twin.build(cell["model"], cell["size"])
        weights = load_tensors(os.path.join(cell_dir, "weights.safetensors"), "cpu")
        own = module.state_dict()
        missing = [k for k, _ in module.named_parameters() if k not in weights]
        if missing:
            raise RuntimeError(f"weights.safetensors lacks {len(missing)} parameters, e.g. {missing[:3]}")
        module.load_state_dict({k: v for k, v in weights.items() if k in own}, strict=False)
        unused = sorted(k for k in weights if k not in own)
        # num_batches_tracked only counts training-mode batch-norm calls; nothing here reads it.
        unset = sorted(k for k in own if k not in weights and not k.endswith("num_batches_tracked"))
        if unused:
            self.notes.append(f"weights not in the PyTorch model: {unused[:5]}")
        if unset:
            self.notes.append(f"PyTorch buffers left at their defaults: {unset[:5]}")
        # Eval mode: no dropout, batch norm with running statistics, as meganeura's models; gradients still flow.
        self.module = module.to(device).eval()
        self.full = load_tensors(os.path.join(cell_dir, "inputs.safetensors"), device)
        self.minimal = load_tensors(os.path.join(cell_dir, "inputs_latency.safetensors"), device)
        self.names = [n for n, p in self.module.named_parameters() if p.requires_grad]
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        name = cell["model"]

        def forward(inputs):
            return twin.run(name, self.module, inputs)

        self.forward = torch.compile(forward, dynamic=False) if compiled else forward
        extra = {"fused": True} if self.cuda else {}
        self.optimizer = torch.optim.AdamW(self.params, **ADAMW, **extra)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def infer(self, inputs):
        with torch.no_grad():
            return self.forward(inputs)

    def train(self):
        for p in self.params:
            p.grad = None
        output, loss = self.forward(self.full)
        loss.backward()
        return output, loss

    def step(self):
        self.optimizer.zero_grad(set_to_none=True)
        output, loss = self.forward(self.full)
        loss.backward()
        self.optimizer.step()
        return output, loss

    def workloads(self):
        return {"inference": lambda: self.infer(self.full), "latency": lambda: self.infer(self.minimal),
                "training": self.train, "step": self.step}

    def results(self):
        """output (inference), loss and grad.<p> (training) on the current weights, and how long the
        first inference and the first training call took (in compile mode: compiling their graphs)."""
        t0 = time.perf_counter()
        output, _ = self.infer(self.full)
        self.sync()
        t1 = time.perf_counter()
        _, loss = self.train()
        self.sync()
        t2 = time.perf_counter()
        out = {"output": output, "loss": loss.reshape(())}
        out.update({"grad." + n: p.grad for n, p in zip(self.names, self.params) if p.grad is not None})
        arrays = {k: v.detach().cpu().numpy() for k, v in out.items()}
        return arrays, {"inference": (t1 - t0) * 1e3, "training": (t2 - t1) * 1e3}

    def reference(self):
        """results() in float64, from the stored float32 weights and inputs widened: the gates' reference.
        (float64 also steps around Debian torch 1.13's float32 CPU conv1d backward, which returns garbage.)"""
        full = self.full
        self.module.double()
        self.full = {k: v.double() if v.is_floating_point() else v for k, v in full.items()}
        try:
            return self.results()[0]
        finally:
            self.module.float()
            self.full = full

    def time(self, fn, warmup, repeat):
        """The first call's time (compiles in compile mode), then wall and GPU times after warm-up."""
        t0 = time.perf_counter()
        fn()
        self.sync()
        first = (time.perf_counter() - t0) * 1e3
        # At least `warmup` runs and WARMUP_SECONDS of work: an idle GPU runs at a low clock for a while.
        warm_start, runs = time.perf_counter(), 1
        while runs < warmup or time.perf_counter() - warm_start < WARMUP_SECONDS:
            fn()
            self.sync()
            runs += 1
        wall, gpu = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            fn()
            if self.cuda:
                end.record()
            self.sync()
            wall.append((time.perf_counter() - t0) * 1e3)
            if self.cuda:
                gpu.append(start.elapsed_time(end))
        return first, wall, gpu


def read_cell(cell_dir):
    with open(os.path.join(cell_dir, "meganeura.json")) as f:
        return json.load(f)


def compile_cell(cell_dir, args, device):
    """--compile-only: compiles the cell's three graphs once, filling the inductor cache, and records
    how long each first call took (its cold compile time) for the timing run to report."""
    cell = read_cell(cell_dir)
    report = {"schema": SCHEMA, "model": cell["model"], "precision": cell["precision"],
              "concurrent": args.concurrent}
    if not hasattr(torch, "compile"):
        raise RuntimeError(f"torch {torch.__version__} has no torch.compile")
    if args.deadline and time.time() > args.deadline:
        report["error"] = "skipped: past the deadline"
        return report
    runner = Runner(find_twin(cell["model"]), cell, cell_dir, device, True)
    set_tf32(cell["precision"] == "fast")
    _, first_calls = runner.results()
    t0 = time.perf_counter()
    runner.infer(runner.minimal)
    runner.sync()
    first_calls["latency"] = (time.perf_counter() - t0) * 1e3
    report["cold_ms"] = first_calls
    return report


def compile_times(cell_dir, first_calls, notes):
    """The compile section of a compile-mode report: cold from an earlier --compile-only run when there
    is one (this run's first calls are then warm, from the inductor cache it left), else this run's."""
    try:
        with open(os.path.join(cell_dir, COLD_FILE)) as f:
            earlier = json.load(f)
        cold = earlier["cold_ms"]
    except (OSError, ValueError, KeyError):
        return {"inference": {"cold_ms": first_calls["inference"], "warm_ms": None},
                "step": {"cold_ms": first_calls["training"], "warm_ms": None}}
    notes.append(f"cold compile times from an earlier first compile ({earlier.get('concurrent', 1)} compiling "
                 "processes at once); warm: this run's first calls, from the inductor cache it left")
    return {"inference": {"cold_ms": cold["inference"], "warm_ms": first_calls["inference"]},
            "step": {"cold_ms": cold["training"], "warm_ms": first_calls["training"]}}


def bench_cell(cell_dir, mode, args, device):
    cell = read_cell(cell_dir)
    compiled = mode == "compile" and hasattr(torch, "compile")
    report = {"schema": SCHEMA, "framework": f"pytorch-{mode}", "model": cell["model"], "size": cell["size"],
              "precision": cell["precision"], "repeat": args.repeat, "warmup": args.warmup,
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch_version": torch.__version__, "compiled": compiled, "binary_bytes": None,
              "files": {"outputs": f"outputs-torch-{mode}.safetensors"}, "notes": []}
    if mode == "compile" and not compiled:
        report["notes"].append(f"torch {torch.__version__} has no torch.compile: this report is eager")
    if args.deadline and time.time() > args.deadline:
        report["error"] = "skipped: past the deadline"
        return report
    twin = find_twin(cell["model"])
    runner = Runner(twin, cell, cell_dir, device, compiled)
    report["notes"] += runner.notes
    if mode == "eager":
        write_safetensors(os.path.join(cell_dir, "reference.safetensors"), runner.reference())
    set_tf32(cell["precision"] == "fast")
    outputs, first_calls = runner.results()
    write_safetensors(os.path.join(cell_dir, report["files"]["outputs"]), outputs)
    # Compile time: the first call of each graph (one run included, milliseconds at most). The step
    # reuses the training graph (the optimizer runs eagerly), so its compile time is the training one.
    report["compile"] = compile_times(cell_dir, first_calls, report["notes"]) if compiled else None
    report["workloads"] = {}
    peak = 0
    for name, fn in runner.workloads().items():
        if runner.cuda:
            torch.cuda.reset_peak_memory_stats(device)
        first, wall, gpu = runner.time(fn, args.warmup, args.repeat)
        result = {"wall_ms": summary(wall), "gpu_ms": summary(gpu), "first_call_ms": first,
                  "dispatches": None, "barriers": None,
                  "peak_device_bytes": torch.cuda.max_memory_allocated(device) if runner.cuda else None,
                  "input_shapes": {k: list(v.shape) for k, v in
                                   (runner.minimal if name == "latency" else runner.full).items()}}
        peak = max(peak, result["peak_device_bytes"] or 0)
        report["workloads"][name] = result
    report["peak_device_bytes"] = peak if runner.cuda else None
    return report


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cells", nargs="+", help="folders written by meganeura bench --out-dir")
    ap.add_argument("--mode", choices=["eager", "compile"], required=True)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--deadline", type=float, default=0, help="skip cells that would start after this time")
    ap.add_argument("--compile-only", action="store_true",
                    help="with --mode compile: compile each cell's graphs once and write " + COLD_FILE)
    ap.add_argument("--concurrent", type=int, default=1, help="how many --compile-only runs share the machine")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.warmup < 1:
        ap.error("--repeat and --warmup must be at least 1")
    if args.compile_only and args.mode != "compile":
        ap.error("--compile-only goes with --mode compile")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    failures = 0
    for cell_dir in args.cells:
        try:
            report = compile_cell(cell_dir, args, device) if args.compile_only else \
                bench_cell(cell_dir, args.mode, args, device)
        except Exception as e:  # one broken cell must not lose the others
            traceback.print_exc()
            report = {"schema": SCHEMA, "framework": f"pytorch-{args.mode}", "error": f"{type(e).__name__}: {e}"}
        failures += "error" in report
        with open(os.path.join(cell_dir, COLD_FILE if args.compile_only else f"torch-{args.mode}.json"), "w") as f:
            json.dump(report, f, indent=2)
        if "error" in report:
            status = report["error"]
        elif args.compile_only:
            status = "compiled in " + ", ".join(f"{k} {v / 1e3:.1f} s" for k, v in report["cold_ms"].items())
        else:
            status = ", ".join(f"{k} {w['wall_ms']['median']:.3f} ms" for k, w in report["workloads"].items())
        print(f"torch {args.mode} {os.path.basename(os.path.normpath(cell_dir))}: {status}", flush=True)
        gc.collect()
        if use_cuda:
            torch.cuda.empty_cache()
        if args.mode == "compile" and hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
