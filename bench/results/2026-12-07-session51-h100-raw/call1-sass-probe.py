#!/usr/bin/env python3
"""Carve ELF images out of NVIDIA's Vulkan pipeline-cache blob(s) and disassemble them with whatever
nvdisasm / cuobjdump the machine has (Triton bundles them). Usage: sass.py OUTDIR CACHEFILE..."""
import glob, os, shutil, struct, subprocess, sys, zlib

out, files = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
tools = []
try:
    import triton
    tools += glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "*"))
except Exception as e:
    print("no triton:", e)
for t in ("nvdisasm", "cuobjdump"):
    if shutil.which(t): tools.append(shutil.which(t))
print("tools:", tools)
nvdisasm = next((t for t in tools if os.path.basename(t) == "nvdisasm"), None)
cuobjdump = next((t for t in tools if os.path.basename(t) == "cuobjdump"), None)
n = 0
for f in files:
    data = open(f, "rb").read()
    print(f, len(data), "bytes; head", data[:64].hex())
    i = data.find(b"\x7fELF")
    if i < 0:
        # maybe compressed: try zlib at every offset of a few candidates
        for j in range(0, min(len(data), 4096)):
            if data[j] == 0x78 and data[j + 1] in (0x01, 0x5e, 0x9c, 0xda):
                try:
                    z = zlib.decompressobj().decompress(data[j:j + 1 << 20])
                    print("zlib stream at", j, "->", len(z), "bytes; ELF inside:", z.find(b"\x7fELF"))
                    break
                except Exception:
                    pass
    while i >= 0:
        if data[i + 4] == 2:  # ELF64
            shoff, = struct.unpack_from("<Q", data, i + 0x28)
            shentsize, shnum = struct.unpack_from("<HH", data, i + 0x3A)
            size = shoff + shentsize * shnum
            if 0 < size < 64 << 20 and i + size <= len(data):
                path = os.path.join(out, "k%03d.cubin" % n)
                open(path, "wb").write(data[i:i + size])
                n += 1
        i = data.find(b"\x7fELF", i + 4)
print(n, "ELF images")
for p in sorted(glob.glob(os.path.join(out, "*.cubin"))):
    for tool, args in ((nvdisasm, ["-c", "-hex"]), (nvdisasm, []), (cuobjdump, ["-sass"])):
        if not tool: continue
        r = subprocess.run([tool] + args + [p], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            open(p + ".sass", "w").write(r.stdout)
            break
        print(os.path.basename(p), os.path.basename(tool), "failed:", r.stderr[:200])
