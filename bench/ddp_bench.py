#!/usr/bin/env python3
"""Data-parallel training at 1, 2 (or 4) GPUs, meganeura --distributed beside PyTorch DDP (issue 21, item 4):
the helpers of bench/ddp_bench.sh.

  ddp_bench.py images WORK --images N [--size 48]
        WORK/resnet50.safetensors, torchvision's ResNet-50 with random weights (torchvision's names, as
        `meganeura finetune -m` reads them), and WORK/images/, N random PNG images in two classes
  ddp_bench.py torch --processes N --model smollm2|resnet50 --batch B [--seq T] [--image-size S]
                 [--steps 30] [--size full|tiny] [--json FILE]
        (it starts the N processes itself, one per GPU, as torchrun would: Debian's torchrun fails on
        Python 3.11, and this needs none of its elasticity)
        PyTorch DDP (NCCL on CUDA, gloo on CPU), the meganeura twin of the model (tests/torch), AdamW
        fused on CUDA, synthetic inputs of B per process; the median step after a fifth of the steps
        (at most 5) as warm-up, and the all-reduce of the gradients' bytes in DDP's 25 MiB buckets timed
        alone (DDP overlaps it with the backward, so that is the cost it hides, not what the step waits)
  ddp_bench.py report WORK --out DIR [--meta k=v ...]
        DIR/ddp.json and DIR/ddp.md from WORK/mn-*.log (the "step time:" line of meganeura finetune)
        and WORK/torch-*.json: step time per GPU count, scaling efficiency (step at 1 GPU / step at N,
        the per-GPU batch held), all-reduce time
"""
import argparse
import glob
import json
import os
import re
import signal
import struct
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))


def png(path, pixels, size):
    """An 8-bit RGB PNG of size x size from `pixels` (bytes, row-major RGB)."""
    rows = b"".join(b"\0" + pixels[y * size * 3:(y + 1) * size * 3] for y in range(size))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b""))


def images(args):
    import torch
    import torchvision
    from safetensors_io import write_safetensors
    torch.manual_seed(0)
    weights = {k: v.numpy() for k, v in torchvision.models.resnet50().state_dict().items()}
    write_safetensors(os.path.join(args.work, "resnet50.safetensors"), weights, metadata={"format": "pt"})
    for c in range(2):
        folder = os.path.join(args.work, "images", f"class{c}")
        os.makedirs(folder, exist_ok=True)
        for i in range((args.images + 1 - c) // 2):
            png(os.path.join(folder, f"{i:05d}.png"), os.urandom(args.size * args.size * 3), args.size)


def launch(args):
    """The processes of a run on this machine, ranks 0 .. N-1, each with torch.distributed's env://
    variables; the worst exit status."""
    import socket
    import subprocess
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    children = [subprocess.Popen(argv, env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.processes),
                                                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
                for r in range(args.processes)]

    def stop(number, frame):  # a time limit's SIGTERM ends the ranks too
        for c in children:
            c.terminate()
        sys.exit(128 + number)
    signal.signal(signal.SIGTERM, stop)
    sys.exit(max(c.wait() for c in children))


def torch_ddp(args):
    if "RANK" not in os.environ:
        launch(args)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world, local = dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # strict, as meganeura's
    torch.manual_seed(rank)
    if args.model == "smollm2":
        import transformer_models as tm
        module = tm.build("smollm2", args.size)
        vocab = tm.CONFIGS["smollm2"][args.size]["vocab"]
        ids = torch.randint(0, vocab, (args.batch, args.seq), device=device)
        inputs = {"input_ids": ids, "labels": ids}
        run = lambda m: tm.run("smollm2", m, inputs)[1]  # noqa: E731
    else:
        import torchvision
        module = torchvision.models.resnet50(num_classes=2).eval()  # batch norms on running statistics, as finetune
        x = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device)
        y = torch.randint(0, 2, (args.batch,), device=device)
        run = lambda m: F.cross_entropy(m(x), y)  # noqa: E731
    module = module.to(device)
    model = DDP(module, device_ids=[local] if cuda else None, bucket_cap_mb=25, gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0, **({"fused": True} if cuda else {}))

    def sync():
        if cuda:
            torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        run(model).backward()
        opt.step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    # The gradients' all-reduce alone, in DDP's buckets, as many times as the steps.
    numel = sum(p.numel() for p in module.parameters() if p.requires_grad)
    bucket = 25 * 2**20 // 4
    flat = torch.zeros(numel, device=device)
    reduce_ms = []
    for _ in range(args.steps):
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for at in range(0, numel, bucket):
            dist.all_reduce(flat[at:at + bucket])
        sync()
        reduce_ms.append((time.perf_counter() - t0) * 1e3)
    warm = min(5, args.steps // 5)
    median = lambda v: sorted(v[warm:])[len(v[warm:]) // 2]  # noqa: E731
    # The slowest rank's median is the step the job takes.
    step = torch.tensor([median(times)], device=device)
    dist.all_reduce(step, op=dist.ReduceOp.MAX)
    if rank == 0 and args.json:
        report = {"framework": "pytorch-ddp", "model": args.model, "gpus": world, "batch_per_gpu": args.batch,
                  "seq": args.seq if args.model == "smollm2" else None, "steps": args.steps, "step_ms": step.item(),
                  "allreduce_alone_ms": median(reduce_ms), "gradient_floats": numel,
                  "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(json.dumps(report))
    dist.destroy_process_group()


def parse_meganeura(path):
    if not os.path.exists(path):
        return {"error": "not run"}
    text = open(path, errors="replace").read()
    m = re.search(r"step time: median ([\d.]+) ms of (\d+) steps(?:, of which all-reduce ([\d.]+) ms)?", text)
    if not m:
        return {"error": (text.strip().splitlines() or ["no output"])[-1]}
    return {"step_ms": float(m[1]), "steps": int(m[2]), "allreduce_ms": float(m[3]) if m[3] else None}


def report(args):
    rows, runs = [], {}
    for path in sorted(glob.glob(os.path.join(args.work, "mn-*.log"))):
        model, gpus = re.match(r"mn-(\w+?)-(\d+)\.log", os.path.basename(path)).groups()
        runs[("meganeura", model, int(gpus))] = parse_meganeura(path)
    for path in sorted(glob.glob(os.path.join(args.work, "torch-*.json"))):
        model, gpus = re.match(r"torch-(\w+?)-(\d+)\.json", os.path.basename(path)).groups()
        r = json.load(open(path))
        runs[("pytorch-ddp", model, int(gpus))] = {"step_ms": r["step_ms"], "allreduce_ms": r["allreduce_alone_ms"]}
    for (framework, model, gpus), r in sorted(runs.items()):
        one = runs.get((framework, model, 1), {}).get("step_ms")
        eff = one / r["step_ms"] if one and r.get("step_ms") else None
        rows.append({"framework": framework, "model": model, "gpus": gpus, **r, "scaling_efficiency": eff})
    meta = dict(kv.split("=", 1) for kv in args.meta)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ddp.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)

    def cell(v, fmt):
        return "—" if v is None else fmt.format(v)
    lines = [f"# Data-parallel training, {meta.get('device', '?')} ({meta.get('date', '?')})", "",
             "Step time per GPU count at the same per-GPU batch (median after warm-up; meganeura: `step()`, inputs' "
             "feeding excluded), scaling efficiency = step at 1 GPU / step at N, and the all-reduce: meganeura's is "
             "rank 0's wait in the gradients' all-reduce within the step (not overlapped); PyTorch DDP's is the same "
             "bytes all-reduced alone in 25 MiB buckets (DDP overlaps it with the backward).", "",
             "| model | framework | GPUs | step ms | scaling efficiency | all-reduce ms |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['framework']} | {r['gpus']} | {cell(r.get('step_ms'), '{:.2f}')} | "
                     f"{cell(r.get('scaling_efficiency'), '{:.0%}')} | {cell(r.get('allreduce_ms'), '{:.2f}')} |"
                     + (f" {r['error']}" if r.get("error") else ""))
    lines += ["", "```"] + [f"{k}: {v}" for k, v in meta.items()] + ["```", ""]
    if args.notes and os.path.exists(args.notes):
        lines += ["Notes:", ""] + open(args.notes).read().splitlines() + [""]
    with open(os.path.join(args.out, "ddp.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("images")
    a.add_argument("work")
    a.add_argument("--images", type=int, required=True)
    a.add_argument("--size", type=int, default=48)
    a = sub.add_parser("torch")
    a.add_argument("--processes", type=int, default=1)
    a.add_argument("--model", choices=("smollm2", "resnet50"), required=True)
    a.add_argument("--batch", type=int, required=True)
    a.add_argument("--seq", type=int, default=256)
    a.add_argument("--image-size", type=int, default=224)
    a.add_argument("--steps", type=int, default=30)
    a.add_argument("--size", choices=("full", "tiny"), default="full")
    a.add_argument("--json")
    a = sub.add_parser("report")
    a.add_argument("work")
    a.add_argument("--out", required=True)
    a.add_argument("--meta", action="append", default=[])
    a.add_argument("--notes")
    args = p.parse_args()
    {"images": images, "torch": torch_ddp, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
