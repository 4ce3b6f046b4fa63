"""cuBLAS through PyTorch on the workload matmul shapes of examples/matmul_bench.cpp, for the
side-by-side ratio: f32 with TF32 off (what strict computes) and f16 operands (what fast's
cooperative-matrix path multiplies). As in matmul_bench, 10 back-to-back matmuls per timed
region (CUDA events), so launch gaps and idle clocks stay out; 3 warm-up regions, median of 20.
Usage: python3 bench/matmul_torch.py"""
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
    ("bwd dx mlp up", 128, 1536, 576, False, False),
    ("bwd dW mlp up", 1536, 128, 576, True, False),
    ("bwd dx lm head", 128, 49152, 576, False, False),
    ("bwd dW lm head", 49152, 128, 576, True, False),
    ("bwd dW Whisper mlp", 1536, 1500, 384, True, False),
    ("square 4096", 4096, 4096, 4096, False, False),
    ("layout probe nn", 2048, 2048, 2048, False, False),
    ("layout probe nt", 2048, 2048, 2048, False, True),
    ("layout probe tn", 2048, 2048, 2048, True, False),
    ("layout probe tt", 2048, 2048, 2048, True, True),
    ("Whisper mlp as nn", 1500, 384, 1536, False, False),
]


def median_ms(fn, runs=20, copies=10):
    def region():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(copies):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / copies
    for _ in range(3):
        region()
    return sorted(region() for _ in range(runs))[runs // 2]


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print("| workload | M x K x N | cuBLAS f32 ms | TFLOP/s | cuBLAS f16 ms | TFLOP/s |")
    print("|---|---|---|---|---|---|")
    for name, m, k, n, ta, tb in WORKLOADS:
        row = []
        for dtype in (torch.float32, torch.float16):
            a = torch.rand((k, m) if ta else (m, k), device="cuda", dtype=dtype) * 2 - 1
            b = torch.rand((n, k) if tb else (k, n), device="cuda", dtype=dtype) * 2 - 1
            aa, bb = (a.t() if ta else a), (b.t() if tb else b)
            ms = median_ms(lambda: torch.matmul(aa, bb))
            row += [ms, 2 * m * n * k / ms / 1e9]
        print(f"| {name} | {m}x{k}x{n} | {row[0]:.4f} | {row[1]:.2f} | {row[2]:.4f} | {row[3]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
