"""cuBLAS through PyTorch on the workload matmul shapes of examples/matmul_bench.cpp, for the
side-by-side ratio: f32 with TF32 off (what strict computes) and f16 operands (what fast's
cooperative-matrix path multiplies). As in matmul_bench, 10 back-to-back matmuls per timed
region (CUDA events), so idle clocks stay out; 3 warm-up regions, median of 20. The 10 matmuls
are captured in a CUDA graph and the region replays it: eager launches cost ~9 us each, longer
than the small shapes' kernels, so eager timing measures the launch (the "eager" columns show it).
Usage: python3 bench/matmul_torch.py [NAME ...]  (only the workloads whose names contain a NAME)"""
import sys

import torch

WORKLOADS = [  # name, M, K, N, A transposed, B transposed (as in matmul_bench.cpp)
    ("SmolLM2 attn proj", 128, 576, 576, False, True),
    ("SmolLM2 k/v proj", 128, 576, 192, False, True),
    ("SmolLM2 mlp up", 128, 576, 1536, False, True),
    ("SmolLM2 mlp down", 128, 1536, 576, False, True),
    ("SmolLM2 lm head", 128, 576, 49152, False, True),
    ("SmolLM2 decode proj", 1, 576, 576, False, True),
    ("SmolLM2 decode mlp up", 1, 576, 1536, False, True),
    ("SmolLM2 decode lm head", 1, 576, 49152, False, True),
    ("SmolVLA expert", 50, 720, 2048, False, True),
    ("Whisper mlp", 1500, 384, 1536, False, True),
    ("Whisper mlp down", 1500, 1536, 384, False, True),
    ("Whisper attn proj", 1500, 384, 384, False, True),
    ("bwd dx mlp up", 128, 1536, 576, False, False),
    ("bwd dW mlp up", 1536, 128, 576, True, False),
    ("bwd dx lm head", 128, 49152, 576, False, False),
    ("bwd dW lm head", 49152, 128, 576, True, False),
    ("bwd dW Whisper mlp", 1536, 1500, 384, True, False),
    ("bwd dx Whisper mlp", 1500, 1536, 384, False, False),
    ("square 4096", 4096, 4096, 4096, False, False),
    ("layout probe nn", 2048, 2048, 2048, False, False),
    ("layout probe nt", 2048, 2048, 2048, False, True),
    ("layout probe tn", 2048, 2048, 2048, True, False),
    ("layout probe tt", 2048, 2048, 2048, True, True),
    ("Whisper mlp as nn", 1500, 384, 1536, False, False),
]


def median_ms(fn, runs=20, copies=10):
    def region(replay):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / copies

    def eager():
        for _ in range(copies):
            fn()

    eager()  # cuBLAS picks and warms its kernel before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        eager()
    out = []
    for replay in (graph.replay, eager):
        for _ in range(3):
            region(replay)
        out.append(sorted(region(replay) for _ in range(runs))[runs // 2])
    return out  # [graph replay, eager]


def main():
    names = sys.argv[1:]
    torch.backends.cuda.matmul.allow_tf32 = False
    print("| workload | M x K x N | cuBLAS f32 ms | TFLOP/s | eager ms | cuBLAS f16 ms | TFLOP/s | eager ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, m, k, n, ta, tb in WORKLOADS:
        if names and not any(x in name for x in names):
            continue
        row = []
        for dtype in (torch.float32, torch.float16):
            a = torch.rand((k, m) if ta else (m, k), device="cuda", dtype=dtype) * 2 - 1
            b = torch.rand((n, k) if tb else (k, n), device="cuda", dtype=dtype) * 2 - 1
            aa, bb = (a.t() if ta else a), (b.t() if tb else b)
            graph_ms, eager_ms = median_ms(lambda: torch.matmul(aa, bb))
            row += [graph_ms, 2 * m * n * k / graph_ms / 1e9, eager_ms]
        print(f"| {name} | {m}x{k}x{n} | {row[0]:.4f} | {row[1]:.2f} | {row[2]:.4f} | {row[3]:.4f} | {row[4]:.2f} | "
              f"{row[5]:.4f} |", flush=True)


if __name__ == "__main__":
    main()
