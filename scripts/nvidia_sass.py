#!/usr/bin/env python3
"""The machine code NVIDIA's Vulkan driver made of each pipeline, read back from meganeura's pipeline cache.

There is no profiler for Vulkan compute here (Nsight Compute profiles CUDA only), and the driver's pipeline
statistics give a register count and little else. But the driver's pipeline cache, which meganeura saves as
$MEGANEURA_CACHE_DIR/pipelines-<uuid>.bin (runtime/pipeline.cpp), holds each pipeline's code: a zstd frame per
entry, whose data is an 'NVDANVVM' tag and an NVuc container of SASS, which nvdisasm reads as a raw binary
(-b SM90). So on the GPU machine run anything with a fresh cache folder, bring the .bin back, and here:

    apt-get install python3-zstandard
    # nvdisasm: Debian's non-free nvidia-cuda-toolkit (CUDA 11.8, which knows SM90); only the one binary is needed:
    apt-get download nvidia-cuda-toolkit && dpkg -x nvidia-cuda-toolkit_*.deb /tmp/cuda
    scripts/nvidia_sass.py pipelines-*.bin OUTDIR --nvdisasm /tmp/cuda/usr/bin/nvdisasm

It writes OUTDIR/NNN.sass (and the .nvuc it read) per pipeline in the cache's order, and prints a line each:
registers, instructions, and the count of the instructions that say most about a kernel (tensor-core HMMA and
their LDSM fragment loads, shared LDS/STS, global LDG/STG, MUFU (exp), barriers, and local-memory LDL/STL, which
mean an array or a spill the compiler put in memory). Pipelines are told apart by those counts: the cache keeps
no kernel names. The container's header is read by nvdisasm only; its format is NVIDIA's and undocumented, so a
later driver may change it (then nvdisasm prints the header it could not read).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SHOWN = ["HMMA", "LDSM", "LDS", "STS", "LDG", "STG", "MUFU", "BAR", "SHFL", "F2FP", "FFMA", "FMUL", "FADD", "LDL", "STL"]
INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def containers(cache: bytes):
    """The NVuc container of each zstd frame of the cache, in order. The magic may also turn up inside a frame's
    compressed bytes: what does not decompress is no frame."""
    view = memoryview(cache)
    at = cache.find(ZSTD_MAGIC)
    while at >= 0:
        try:
            data = zstandard.ZstdDecompressor().decompressobj().decompress(view[at:])
        except zstandard.ZstdError:
            data = b""
        start = data.find(b"NVuc")
        if start >= 0:
            yield data[start:]
        at = cache.find(ZSTD_MAGIC, at + len(ZSTD_MAGIC))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache", help="a pipelines-<uuid>.bin from MEGANEURA_CACHE_DIR")
    parser.add_argument("out", help="folder for the listings")
    parser.add_argument("--nvdisasm", default="nvdisasm", help="CUDA's nvdisasm (11.8 or later, for SM90)")
    parser.add_argument("--arch", default="SM90", help="nvdisasm's -b architecture (SM90: H100, H200)")
    args = parser.parse_args()
    try:
        with open(args.cache, "rb") as f:
            cache = f.read()
    except OSError as e:
        print("nvidia_sass.py: cannot read the cache %s: %s" % (args.cache, e.strerror), file=sys.stderr)
        return 1
    if not shutil.which(args.nvdisasm):
        print("nvidia_sass.py: no nvdisasm at '%s' (--nvdisasm; the docstring says where to get one)" % args.nvdisasm,
              file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    count = 0
    for index, nvuc in enumerate(containers(cache)):
        count = index + 1
        path = os.path.join(args.out, "%03d" % index)
        with open(path + ".nvuc", "wb") as f:
            f.write(nvuc)
        listing = subprocess.run([args.nvdisasm, "-b", args.arch, path + ".nvuc"], capture_output=True, text=True, check=False)
        with open(path + ".sass", "w") as f:
            f.write(listing.stdout + listing.stderr)
        ops = collections.Counter(INSTRUCTION.findall(listing.stdout))
        registers = re.search(r"Register count=(\d+)", listing.stdout)
        print("%03d registers %s, %d instructions: %s" % (
            index, registers.group(1) if registers else "?", sum(ops.values()),
            " ".join("%s %d" % (op, ops[op]) for op in SHOWN if ops[op])))
    if not count:
        print("nvidia_sass.py: no zstd-framed NVuc entries in " + args.cache, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
