#!/usr/bin/env python3
"""The PyTorch side of the benchmark: the workloads of `meganeura bench`, on identical values.

  torch_bench.py --mode eager|compile|cudagraphs|cudagraphs,compile [--repeat 20] [--warmup 3]
                 [--device auto|cuda|cpu] [--deadline UNIX_SECONDS] [--processes N --rendezvous DIR]
                 [--warm-compile] CELL_DIR...

A cell folder is what `meganeura bench --out-dir DIR --json DIR/meganeura.json` wrote: meganeura.json
names the model, size and precision; weights.safetensors, inputs.safetensors and
inputs_latency.safetensors hold the values. For each cell this writes

  torch-<mode>.json                    the report, in meganeura's schema (bench/README.md)
  outputs-torch-<mode>.safetensors     "output", "loss", "grad.<parameter>" as this mode computed them
  reference.safetensors                (eager only) the same in float64 from the same float32 weights
                                       and inputs: the reference bench/compare.py gates every framework against

Workloads as meganeura's: inference and latency (forward + loss, no grad, full and minimal input),
training (forward + loss + backward) and step (the same plus AdamW, lr 1e-3, weight decay 1e-2, fused
on CUDA). strict = TF32 off for matmuls and convolutions, fast = TF32 on; cuDNN's autotuner on
(torch.backends.cudnn.benchmark) in both. Times: wall clock around
each run ended by torch.cuda.synchronize, and on CUDA the GPU span between two CUDA events, after
warm-up runs.

Modes: eager; compile, torch.compile(dynamic=False) with its default mode; cudagraphs,
torch.compile(mode="reduce-overhead"), which replays CUDA graphs: each call begins with
torch.compiler.cudagraph_mark_step_begin() and its output and loss are cloned out of the graph's
memory pool (the next replay overwrites it), as a training loop that keeps them would.
Eager mode runs one cell after the other. The compiled modes first compile every cell's graphs (the
first calls: the cold compile times), then time them, and with --warm-compile compile them again
after torch._dynamo.reset() (from the inductor cache: the warm compile times; off by default, it
adds a few seconds per graph and no timing). Modes given together ("cudagraphs,compile") compile in
that order in one process, so the later ones find the earlier ones' kernels in the caches and their
cold times are not cold; their reports say so. Compiling is the slow part (minutes for SmolLM2), so
bench/run_gpu.sh runs one compiled-mode process per cell, all at once, with --processes N
--rendezvous DIR: they wait for each other between the stages, so the compiles share the machine
while the timing has it alone, one process at a time.
Each model comes from its twin: a module in tests/torch with NAMES, build(name, size) and
run(name, module, inputs) -> (output, loss) (see tests/torch/mlp_model.py).

A cell that fails, or a stage that would start after --deadline, gets a report with "error" and the
next cell goes on. Without torch.compile (Debian's torch 1.13) the compiled modes run eagerly and say so.
"""
import argparse
import contextlib
import fcntl
import gc
import glob
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
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)  # mn::AdamW's defaults
# torch.compile's arguments for each compiled mode.
COMPILED_MODES = {"compile": {}, "cudagraphs": {"mode": "reduce-overhead"}}


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


def set_backends(fast):
    """TF32 for precision fast only; and cuDNN's autotuner, as a PyTorch user with fixed shapes turns it on (its
    heuristics' convolutions are what the protocol timed before 2026-12-05)."""
    with warnings.catch_warnings():  # newer releases prefer fp32_precision but honour these
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = fast
        torch.backends.cudnn.allow_tf32 = fast
    torch.backends.cudnn.benchmark = True


def load_tensors(path, device):
    return {k: torch.from_numpy(v).to(device) for k, v in read_safetensors(path).items()}


# Seconds one cell's timing takes at most (SmolLM2's four workloads take about 3 on the H200).
TIMING_SECONDS = 8
# Seconds of warm-up before timing (see `meganeura bench`, which uses the same).
WARMUP_SECONDS = 0.3


class Runner:
    """One cell's model on one device, with its four workloads as closures."""

    def __init__(self, twin, cell, cell_dir, device, mode, compiled):
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

        self.forward = torch.compile(forward, dynamic=False, **COMPILED_MODES[mode]) if compiled else forward
        if compiled and mode == "cudagraphs":
            graphed = self.forward

            def forward_replayed(inputs):
                torch.compiler.cudagraph_mark_step_begin()
                output, loss = graphed(inputs)
                return output.clone(), loss.clone()

            self.forward = forward_replayed
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


def rendezvous(args, stage, give_up_at):
    """Marks this process as past `stage` and waits until all --processes are, or until give_up_at
    (a time; 0: the deadline). Says whether they all arrived."""
    if args.processes <= 1:
        return True
    open(os.path.join(args.rendezvous, f"{stage}-{os.getpid()}"), "w").close()
    give_up_at = give_up_at or args.deadline
    while len(glob.glob(os.path.join(args.rendezvous, f"{stage}-*"))) < args.processes:
        if give_up_at and time.time() > give_up_at:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def machine_to_myself(args):
    """Only one of the --processes times its cells at a time."""
    if args.processes <= 1:
        yield
        return
    with open(os.path.join(args.rendezvous, "timing.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def past_deadline(args):
    return args.deadline and time.time() > args.deadline


class Cell:
    """One cell in one mode: its report, and while it lives, the model runner."""

    def __init__(self, cell_dir, mode, args, device):
        self.dir, self.mode, self.runner = cell_dir, mode, None
        self.cell = read_cell(cell_dir)
        self.compiled = mode in COMPILED_MODES and hasattr(torch, "compile")
        self.report = {"schema": SCHEMA, "framework": f"pytorch-{mode}", "model": self.cell["model"],
                       "size": self.cell["size"], "precision": self.cell["precision"], "repeat": args.repeat,
                       "warmup": args.warmup,
                       "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                       "torch_version": torch.__version__, "compiled": self.compiled, "binary_bytes": None,
                       "cell_started_at": self.cell.get("started_at"),
                       "files": {"outputs": f"outputs-torch-{mode}.safetensors"}, "notes": []}
        if mode in COMPILED_MODES and not self.compiled:
            self.report["notes"].append(f"torch {torch.__version__} has no torch.compile: this report is eager")

    def fail(self, e):
        traceback.print_exc()
        self.report["error"] = f"{type(e).__name__}: {e}"
        self.runner = None

    def build(self, device):
        """The model, the eager reference (eager mode) and the outputs; in compile mode the first calls
        compile the graphs from an empty inductor cache: the cold compile times."""
        self.runner = Runner(find_twin(self.cell["model"]), self.cell, self.dir, device, self.mode, self.compiled)
        self.report["notes"] += self.runner.notes
        if self.mode == "eager":
            write_safetensors(os.path.join(self.dir, "reference.safetensors"), self.runner.reference())
        set_backends(self.cell["precision"] == "fast")
        outputs, first_calls = self.runner.results()
        write_safetensors(os.path.join(self.dir, self.report["files"]["outputs"]), outputs)
        if self.compiled:  # the latency graph too: nothing compiles while the cells are timed
            self.runner.infer(self.runner.minimal)
            self.runner.sync()
        # The first call of each graph (one run included, milliseconds at most). The step reuses the
        # training graph (the optimizer runs eagerly), so its compile time is the training one.
        self.report["compile"] = {"inference": {"cold_ms": first_calls["inference"], "warm_ms": None},
                                  "step": {"cold_ms": first_calls["training"], "warm_ms": None}} \
            if self.compiled else None

    def time(self, args, device):
        set_backends(self.cell["precision"] == "fast")
        runner, workloads, peak = self.runner, {}, 0
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
            workloads[name] = result
        self.report["workloads"] = workloads
        self.report["peak_device_bytes"] = peak if runner.cuda else None

    def compile_warm(self, device):
        """Compiles the graphs again in a fresh dynamo, from the inductor cache the cold compile left."""
        self.runner = None
        gc.collect()
        torch._dynamo.reset()
        set_backends(self.cell["precision"] == "fast")
        runner = Runner(find_twin(self.cell["model"]), self.cell, self.dir, device, self.mode, True)
        _, first_calls = runner.results()
        self.report["compile"]["inference"]["warm_ms"] = first_calls["inference"]
        self.report["compile"]["step"]["warm_ms"] = first_calls["training"]

    def write(self):
        with open(os.path.join(self.dir, f"torch-{self.mode}.json"), "w") as f:
            json.dump(self.report, f, indent=2)
        if "error" in self.report:
            status = self.report["error"]
        else:
            status = ", ".join(f"{k} {w['wall_ms']['median']:.3f} ms" for k, w in self.report["workloads"].items())
            if self.compiled:
                status += "; compiled in " + ", ".join(
                    f"{k} {c['cold_ms'] / 1e3:.1f} s cold" + (f", {c['warm_ms'] / 1e3:.1f} s warm" if c["warm_ms"] else "")
                    for k, c in self.report["compile"].items())
        print(f"torch {self.mode} {os.path.basename(os.path.normpath(self.dir))}: {status}", flush=True)


def attempt(cell, what, args, *call_args):
    """Runs one stage of a cell unless it already failed or the deadline passed; a failure is recorded
    in its report and the other cells go on."""
    if "error" in cell.report:
        return
    if past_deadline(args):
        cell.report["error"] = f"skipped: past the deadline ({what})"
        cell.runner = None
        return
    try:
        getattr(cell, what)(*call_args)
    except Exception as e:  # one broken cell must not lose the others
        cell.fail(e)


def run_eager(cells, args, device):
    """One cell after the other: build (with the float64 reference), time, write."""
    for cell in cells:
        attempt(cell, "build", args, device)
        attempt(cell, "time", args, args, device)
        cell.runner = None
        cell.write()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def cold_note(cell, cells, args):
    """What the cold compile times of `cell` are: the first calls of its mode in this process."""
    earlier = [c.mode for c in cells[:cells.index(cell)] if c.dir == cell.dir]
    if earlier:
        return (f"cold: the first calls after {', '.join(earlier)} compiled the same model in this process "
                "(the generated kernels come from its caches: not a cold compile)")
    return "cold: the first calls with an empty inductor cache" + (
        f" ({args.processes} processes compiling at once)" if args.processes > 1 else "")


def run_compiled(cells, args, device):
    """Compile every cell (cold), then time them, then with --warm-compile compile them again (warm).
    With --processes N, N such processes run at once and wait for each other between the stages, so
    the cold compiles share the machine, the timing has it alone (one process at a time) and no graph
    is compiled twice before it is timed."""
    limit = max(64, 8 * len(cells))  # each runner's three graphs are separate entries for one function
    for option in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, option):
            setattr(torch._dynamo.config, option, limit)
    for cell in cells:
        attempt(cell, "build", args, device)
    # A process still compiling near the deadline must not cost the others their timings.
    if not rendezvous(args, "compiled", args.deadline and args.deadline - TIMING_SECONDS * args.processes * len(cells)):
        for cell in cells:
            cell.report["notes"].append("timed while other processes were still compiling (near the deadline)")
    with machine_to_myself(args):
        for cell in cells:
            attempt(cell, "time", args, args, device)
    rendezvous(args, "timed", 0)
    for cell in cells:
        if "error" in cell.report:
            continue
        cell.report["notes"].append(cold_note(cell, cells, args))
        if not args.warm_compile:
            cell.report["notes"].append("warm compile not measured (torch_bench.py --warm-compile)")
        elif past_deadline(args):
            cell.report["notes"].append("warm compile not measured: past the deadline")
        else:
            try:
                cell.compile_warm(device)
                cell.report["notes"].append("warm: the first calls after torch._dynamo.reset(), from the inductor cache")
            except Exception as e:  # the timings stand without it
                traceback.print_exc()
                cell.report["notes"].append(f"warm compile failed: {type(e).__name__}: {e}")
    for cell in cells:
        cell.write()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cells", nargs="+", help="folders written by meganeura bench --out-dir")
    ap.add_argument("--mode", required=True,
                    help="eager, compile or cudagraphs; compiled modes together (cudagraphs,compile) share a process")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--deadline", type=float, default=0, help="skip what would start after this time")
    ap.add_argument("--processes", type=int, default=1,
                    help="with compiled modes: how many torch_bench.py processes run at once (see --rendezvous)")
    ap.add_argument("--rendezvous", help="with --processes: a folder they share to wait for each other")
    ap.add_argument("--warm-compile", action="store_true",
                    help="with compiled modes: compile again after the timing, from the caches (the warm times)")
    args = ap.parse_args(argv)
    modes = args.mode.split(",")
    if modes != ["eager"] and (len(set(modes)) != len(modes) or any(m not in COMPILED_MODES for m in modes)):
        ap.error(f"--mode must be eager or compiled modes ({', '.join(COMPILED_MODES)}), each once; got {args.mode!r}")
    if args.repeat < 1 or args.warmup < 1:
        ap.error("--repeat and --warmup must be at least 1")
    if args.processes < 1 or (args.processes > 1 and (modes == ["eager"] or not args.rendezvous)):
        ap.error("--processes N > 1 goes with compiled modes and --rendezvous DIR")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    cells, unreadable = [], 0
    for cell_dir in args.cells:
        try:
            cells += [Cell(cell_dir, mode, args, device) for mode in modes]
        except (OSError, ValueError, KeyError) as e:  # no readable meganeura.json: no cell to time
            print(f"torch {args.mode} {cell_dir}: {type(e).__name__}: {e}", flush=True)
            unreadable += 1
    if modes != ["eager"] and hasattr(torch, "compile"):
        run_compiled(cells, args, device)
    else:
        run_eager(cells, args, device)
    return 1 if unreadable or any("error" in c.report for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
