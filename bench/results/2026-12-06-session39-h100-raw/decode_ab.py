# Per-token decode time at 4K, binaries/env variants taking turns (decode_bench.py's method, meganeura only).
#   decode_ab.py name=binary[@VAR=VALUE][%fast] ...
import os, statistics, sys
sys.path.insert(0, "bench")
import decode_bench as db
res = {}
for r in range(3):
    for spec in sys.argv[1:]:
        name, rest = spec.split("=", 1)
        rest, precision = (rest.split("%", 1) + ["strict"])[:2]
        binary, env = (rest.split("@", 1) + [""])[:2]
        saved = dict(os.environ)
        if env:
            k, v = env.split("=", 1)
            os.environ[k] = v
        out = db.meganeura_per_token(os.path.realpath(binary), "full", 4096, 1, 49152, (9, 265), precision)
        os.environ.clear(); os.environ.update(saved)
        res.setdefault(name, []).append(out["per_token_ms"])
for name, v in res.items():
    print(f"{name}: median {statistics.median(v):.4f} ms/token  runs {[round(x, 4) for x in v]}")
