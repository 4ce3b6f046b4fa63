#!/usr/bin/env python3
# The cooperative attention backward (src/codegen/attention_coop_backward.cpp) emulated on the CPU, for the
# index math a development machine cannot run: no device here has NV cooperative matrices. A
# fragment-level transcription of attention_grad_q_coop and attention_grad_kv_coop, one loop over the
# threads per phase between barriers, the cooperative loads and stores with the offsets, strides and
# orders the GLSL passes (units of uvec4 = 8 halves in the f16 arrays, as glslang 12's coopMatLoadNV reads
# them, verified on the H200 by the forward), the skips, masks and power-of-two scales as written, and f16
# rounding where the kernels round; against float64. Keep it in step with the GLSL: the methods product_to_ws,
# ds_to_ps and accumulate_ps_times are its macros PRODUCT_TO_WS, DS_TO_PS and ACCUMULATE_PS_TIMES.
#
#   scripts/attention_coop_backward_emulation.py [CASE...]     (python3 only; a few seconds)
#
# Prints each case's relative L2 errors of dq, dk and dv; at 2026-12-02 all were 4.0e-4 to 6.6e-4 (the
# tests' bound on a cooperative device is 2e-3); a wrong load order gives errors of order 1, and an
# unwritten element raises.
import math, random, struct, sys
def h(x):
    try: return struct.unpack('e', struct.pack('e', x))[0]
    except OverflowError: return math.copysign(math.inf, x)
def scale_for(m):
    if not m > 0: return 2.0 ** 126
    if math.isinf(m): return 1.0
    return 2.0 ** max(-126, min(126, 14 - math.frexp(m)[1]))
NEG_INF = -math.inf

def problem(B, Hq, Hkv, Tq, Tk, D, causal=False, window=0, start=None, upstream=1.0, seed=3):
    rnd = random.Random(seed)
    G = Hq // Hkv
    P = dict(HEADS=B * Hkv, G=G, TQ=Tq, TK=Tk, DH=D, CAUSAL=causal, WINDOW=window,
             QSTART=Tk - Tq if start is None else start, SCALE=1 / math.sqrt(D))
    U = lambda n, s=1.0: [rnd.uniform(-2, 2) * s for _ in range(n)]
    P['q'], P['k'], P['v'] = U(B * Hq * Tq * D), U(B * Hkv * Tk * D), U(B * Hkv * Tk * D)
    P['dout'] = U(B * Hq * Tq * D, upstream)
    # exact forward (lse, out -> delta) and backward
    ROWS = G * Tq
    lse = [0.0] * (P['HEADS'] * ROWS); delta = [0.0] * len(lse)
    dq = [0.0] * len(P['q']); dk = [0.0] * len(P['k']); dv = [0.0] * len(P['v'])
    for head in range(P['HEADS']):
        for r in range(ROWS):
            pos = P['QSTART'] + r % Tq
            vis = [j for j in range(Tk) if sees(P, pos, j)]
            qr = P['q'][(head * ROWS + r) * D:(head * ROWS + r + 1) * D]
            do = P['dout'][(head * ROWS + r) * D:(head * ROWS + r + 1) * D]
            if not vis:
                lse[head * ROWS + r] = NEG_INF; continue
            s = {j: P['SCALE'] * sum(a * b for a, b in zip(qr, P['k'][(head * Tk + j) * D:(head * Tk + j + 1) * D])) for j in vis}
            m = max(s.values()); l = sum(math.exp(x - m) for x in s.values())
            L = m + math.log(l); lse[head * ROWS + r] = L
            p = {j: math.exp(s[j] - L) for j in vis}
            o = [sum(p[j] * P['v'][(head * Tk + j) * D + d] for j in vis) for d in range(D)]
            dl = sum(a * b for a, b in zip(do, o)); delta[head * ROWS + r] = dl
            for j in vis:
                dp = sum(a * b for a, b in zip(do, P['v'][(head * Tk + j) * D:(head * Tk + j + 1) * D]))
                ds = p[j] * (dp - dl)
                for d in range(D):
                    dq[(head * ROWS + r) * D + d] += P['SCALE'] * ds * P['k'][(head * Tk + j) * D + d]
                    dk[(head * Tk + j) * D + d] += P['SCALE'] * ds * qr[d]
                    dv[(head * Tk + j) * D + d] += p[j] * do[d]
    P['lse'], P['delta'] = lse, delta
    return P, dict(dq=dq, dk=dk, dv=dv)

def sees(P, position, j):
    if not P['CAUSAL']: return True
    return j <= position and (P['WINDOW'] == 0 or j > position - P['WINDOW'])
def key_range(P, r0, r1):
    TQ, TK = P['TQ'], P['TK']
    if not P['CAUSAL']: return (0, TK)
    s = P['QSTART']; lo = s + r0 % TQ; hi = s + r1 % TQ
    if r1 // TQ != r0 // TQ: lo, hi = s, s + TQ - 1
    begin = 0 if P['WINDOW'] == 0 else lo - P['WINDOW'] + 1
    return (min(max(begin, 0), TK), min(max(hi + 1, 0), TK))
def query_range(P, j0, j1):
    TQ = P['TQ']
    if not P['CAUSAL']: return (0, TQ)
    s = P['QSTART']; begin = j0 - s
    end = TQ if P['WINDOW'] == 0 else j1 + P['WINDOW'] - s
    return (min(max(begin, 0), TQ), min(max(end, 0), TQ))

class K:  # one workgroup's shared state and the GLSL's constants
    def __init__(s, P, BR, BT):
        s.P, s.BR, s.BT, s.WG = P, BR, BT, 2 * BR
        s.DH = P['DH']; s.D8 = s.DH // 8; s.D4 = s.D8 + 1; s.P4 = BT // 8 + 1; s.SW = BT + 4
        s.TG = BT // 16; s.OG = s.DH // 16; s.NW = s.WG // 32; s.ROWS = P['G'] * P['TQ']
        s.Ps = [math.nan] * (BR * s.P4 * 8); s.Ws = [math.nan] * (BR * s.SW)
    def groups(s, rows): return (rows * s.D8 + s.WG - 1) // s.WG
    def group_load(s, lid, u, src, first, rows, valid):
        e = lid + u * s.WG; i, c = e // s.D8, e % s.D8
        if e < rows * s.D8 and i < valid:
            a = (first + i) * s.DH + c * 8
            return src[a:a + 8]
        return [0.0] * 8
    def group_put(s, lid, u, dst, rows, at, vals, factor):
        e = lid + u * s.WG
        if e < rows * s.D8:
            base = (at + e // s.D8 * s.D4 + e % s.D8) * 8
            for k in range(8): dst[base + k] = h(vals[k] * factor)
    def stage(s, dst, src, first, rows, valid, at, factor):
        for lid in range(s.WG):
            for u in range(s.groups(rows)):
                s.group_put(lid, u, dst, rows, at, s.group_load(lid, u, src, first, rows, valid), factor)
    def fetch(s, src, first, rows, valid):  # per thread: regs, m
        out = []
        for lid in range(s.WG):
            regs = [s.group_load(lid, u, src, first, rows, valid) for u in range(s.groups(rows))]
            out.append((regs, max([abs(x) for g in regs for x in g] + [0.0])))
        return out
    def put(s, dst, fetched, rows, at, factor):
        for lid in range(s.WG):
            for u, vals in enumerate(fetched[lid][0]): s.group_put(lid, u, dst, rows, at, vals, factor)
    @staticmethod
    def load(arr, off, stride, col_major):  # f16 matrix from a uvec4 array
        return [[arr[off * 8 + (c * stride * 8 + r if col_major else r * stride * 8 + c)] for c in range(16)] for r in range(16)]
    @staticmethod
    def mma(a, b, c):
        return [[c[r][n] + sum(a[r][t] * b[t][n] for t in range(16)) for n in range(16)] for r in range(16)]
    def store_ws(s, m, off, stride):
        for r in range(16):
            for c in range(16): s.Ws[off + r * stride + c] = m[r][c]
    zero = staticmethod(lambda: [[0.0] * 16 for _ in range(16)])
    def cols(s, side, t):  # this thread's 8 columns of group t
        return [(side + 2 * t) * 8 + e for e in range(8)]
    def take_scale(s, sc, ms, accs):
        new = min(sc, scale_for(max(ms)))
        if new != sc:
            for a in accs:
                for r in range(16):
                    for c in range(16): a[r][c] *= new / sc
        return new
    # The GLSL's macros (attention_coop.cpp's kCoopAttentionCommon), for subgroup w.
    def product_to_ws(s, w, left, src, at):  # PRODUCT_TO_WS: left[OG] times the staged rows, transposed, into Ws
        for n in range(s.TG):
            x = s.zero()
            for i in range(s.OG): x = s.mma(left[i], s.load(src, at + n * 16 * s.D4 + i * 2, s.D4, True), x)
            s.store_ws(x, w * 16 * s.SW + n * 16, s.SW)
    def ds_to_ps(s, w, p, delta, inv_o, scale, accs):  # DS_TO_PS: dS = P (dP - delta(col)) as f16 into Ps; the new scale
        ms = []
        for lane in range(32):
            rr, side = lane % 16, lane // 16; srow = (w * 16 + rr) * s.SW
            for t in range(s.TG):
                for col in s.cols(side, t):
                    p[lane, col] *= s.Ws[srow + col] * inv_o - delta(lane, col); ms.append(abs(p[lane, col]))
        scale = s.take_scale(scale, ms, accs)
        for lane in range(32):
            rr, side = lane % 16, lane // 16; prow = (w * 16 + rr) * s.P4
            for t in range(s.TG):
                for e, col in enumerate(s.cols(side, t)): s.Ps[(prow + side + 2 * t) * 8 + e] = h(p[lane, col] * scale)
        return scale
    def accumulate_ps_times(s, w, accs, src, at):  # ACCUMULATE_PS_TIMES: accs += (Ps's rows) times the staged rows
        pf = [s.load(s.Ps, w * 16 * s.P4 + t * 2, s.P4, False) for t in range(s.TG)]
        for dn in range(s.OG):
            for t in range(s.TG): accs[dn] = s.mma(pf[t], s.load(src, at + t * 16 * s.D4 + dn * 2, s.D4, False), accs[dn])
    def store_rows(s, warp, accs, factor, dst, first, valid):
        for c0 in range(0, s.DH, s.BT):
            for dn in range(c0 // 16, min(c0 + s.BT, s.DH) // 16): s.store_ws(accs[dn], warp * 16 * s.SW + dn * 16 - c0, s.SW)
            for lane in range(32):
                rr, side = lane % 16, lane // 16; srow = (warp * 16 + rr) * s.SW
                for t in range(s.OG):
                    col = (side + 2 * t) * 8
                    if rr < valid and c0 <= col < c0 + s.BT:
                        for e in range(8): dst[(first + rr) * s.DH + col + e] = s.Ws[srow + col - c0 + e] * factor

def grad_q(P, BR, BT, out):
    k = K(P, BR, BT); ROWS = k.ROWS; blocks = (ROWS + BR - 1) // BR; OG, TG, D4, SW = k.OG, k.TG, k.D4, k.SW
    VOFF = BT * D4
    for g in range(P['HEADS'] * blocks):
        k.__init__(P, BR, BT); KV = [math.nan] * (2 * VOFF * 8)
        head, r0 = g // blocks, (g % blocks) * BR
        keys = key_range(P, r0, min(r0 + BR, ROWS) - 1)
        k.stage(KV, P['q'], head * ROWS + r0, BR, ROWS - r0, 0, P['SCALE'])
        ro = k.fetch(P['dout'], head * ROWS + r0, BR, ROWS - r0)
        Xm = [max(ro[w * 32 + l][1] for l in range(32)) for w in range(k.NW)]
        qf = [[k.load(KV, w * 16 * D4 + i * 2, D4, False) for i in range(OG)] for w in range(k.NW)]
        o_scale = scale_for(max(Xm)); inv_o = 1.0 / o_scale
        k.put(KV, ro, BR, 0, o_scale)
        of = [[k.load(KV, w * 16 * D4 + i * 2, D4, False) for i in range(OG)] for w in range(k.NW)]
        acc = [[k.zero() for _ in range(OG)] for w in range(k.NW)]; g_scale = [2.0 ** 126] * k.NW
        for j0 in range(keys[0], keys[1], BT):
            k.stage(KV, P['k'], head * P['TK'] + j0, BT, P['TK'] - j0, 0, 1.0)
            k.stage(KV, P['v'], head * P['TK'] + j0, BT, P['TK'] - j0, VOFF, 1.0)
            for w in range(k.NW):
                w0 = r0 + w * 16
                if w0 >= ROWS: continue
                seen = key_range(P, w0, min(w0 + 16, ROWS) - 1)
                if j0 >= seen[1] or j0 + BT <= seen[0]: continue
                k.product_to_ws(w, qf[w], KV, 0)
                p = {}
                for lane in range(32):
                    rr, side = lane % 16, lane // 16; r = w0 + rr; live = r < ROWS
                    position = P['QSTART'] + r % P['TQ']; srow = (w * 16 + rr) * SW
                    row_lse = P['lse'][head * ROWS + r] if live else 0.0
                    for t in range(TG):
                        for col in k.cols(side, t):
                            j = j0 + col
                            p[lane, col] = math.exp(k.Ws[srow + col] - row_lse) if live and j < keys[1] and sees(P, position, j) else 0.0
                k.product_to_ws(w, of[w], KV, VOFF)
                row_delta = lambda lane, col: P['delta'][head * ROWS + w0 + lane % 16] if w0 + lane % 16 < ROWS else 0.0
                g_scale[w] = k.ds_to_ps(w, p, row_delta, inv_o, g_scale[w], acc[w])
                k.accumulate_ps_times(w, acc[w], KV, 0)
        for w in range(k.NW):
            w0 = r0 + w * 16
            if w0 < ROWS: k.store_rows(w, acc[w], P['SCALE'] / g_scale[w], out, head * ROWS + w0, ROWS - w0)

def grad_kv(P, BR, BT, dk_out, dv_out):
    k = K(P, BR, BT); TK, ROWS = P['TK'], k.ROWS; blocks = (TK + BR - 1) // BR; OG, TG, D4, P4, SW = k.OG, k.TG, k.D4, k.P4, k.SW
    OOFF = BT * D4
    for g in range(P['HEADS'] * blocks):
        k.__init__(P, BR, BT); QO = [math.nan] * (2 * OOFF * 8)
        head, j0 = g // blocks, (g % blocks) * BR
        s0 = P['QSTART']; queries = query_range(P, j0, min(j0 + BR, TK) - 1)
        k.stage(QO, P['k'], head * TK + j0, BR, TK - j0, 0, 1.0)
        kf = [[k.load(QO, w * 16 * D4 + i * 2, D4, False) for i in range(OG)] for w in range(k.NW)]
        k.stage(QO, P['v'], head * TK + j0, BR, TK - j0, 0, 1.0)
        vf = [[k.load(QO, w * 16 * D4 + i * 2, D4, False) for i in range(OG)] for w in range(k.NW)]
        dk = [[k.zero() for _ in range(OG)] for w in range(k.NW)]; dv = [[k.zero() for _ in range(OG)] for w in range(k.NW)]
        o_scale = 2.0 ** 126; g_scale = [2.0 ** 126] * k.NW
        per_head = (queries[1] - queries[0] + BT - 1) // BT; steps = P['G'] * per_head
        for step in range(steps):
            t0 = queries[0] + (step % per_head) * BT; rbase = head * ROWS + step // per_head * P['TQ'] + t0
            valid = queries[1] - t0
            k.stage(QO, P['q'], rbase, BT, valid, 0, P['SCALE'])
            ro = k.fetch(P['dout'], rbase, BT, valid)
            Ls = [P['lse'][rbase + i] if i < valid else 0.0 for i in range(BT)]
            Dl = [P['delta'][rbase + i] if i < valid else 0.0 for i in range(BT)]
            m = max(x[1] for x in ro)
            new = min(o_scale, scale_for(m))
            if new != o_scale:
                for w in range(k.NW):
                    for a in dv[w]:
                        for r in range(16):
                            for c in range(16): a[r][c] *= new / o_scale
                o_scale = new
            k.put(QO, ro, BT, OOFF, o_scale)
            for w in range(k.NW):
                k0 = j0 + w * 16
                if k0 >= TK: continue
                seen = query_range(P, k0, min(k0 + 16, TK) - 1)
                if t0 >= seen[1] or t0 + BT <= seen[0]: continue
                k.product_to_ws(w, kf[w], QO, 0)
                p = {}
                for lane in range(32):
                    rr, side = lane % 16, lane // 16; key = k0 + rr; live = key < TK
                    srow, prow = (w * 16 + rr) * SW, (w * 16 + rr) * P4
                    for t in range(TG):
                        for e, col in enumerate(k.cols(side, t)):
                            p[lane, col] = math.exp(k.Ws[srow + col] - Ls[col]) if live and col < valid and sees(P, s0 + t0 + col, key) else 0.0
                            k.Ps[(prow + side + 2 * t) * 8 + e] = h(p[lane, col])
                k.accumulate_ps_times(w, dv[w], QO, OOFF)
                k.product_to_ws(w, vf[w], QO, OOFF)
                g_scale[w] = k.ds_to_ps(w, p, lambda lane, col: Dl[col], 1.0 / o_scale, g_scale[w], dk[w])
                k.accumulate_ps_times(w, dk[w], QO, 0)
        for w in range(k.NW):
            k0 = j0 + w * 16
            if k0 < TK:
                k.store_rows(w, dk[w], 1.0 / g_scale[w], dk_out, head * TK + k0, TK - k0)
                k.store_rows(w, dv[w], 1.0 / o_scale, dv_out, head * TK + k0, TK - k0)

def rel(got, want):
    assert not any(math.isnan(x) for x in got), 'unwritten'
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(got, want)) / sum(b * b for b in want))

# Workgroups of 1, 2 and 4 subgroups, 16- to 64-row tiles, GQA, windows, head dims stored in chunks.
CASES = {  # name: (problem, dQ BR/BT, dK/dV BR/BT)
    'whisper_like_40_d64': (dict(B=1, Hq=2, Hkv=2, Tq=40, Tk=40, D=64), (64, 64), (64, 64)),
    'causal_gqa_3_33_d32_small_wg': (dict(B=1, Hq=3, Hkv=1, Tq=33, Tk=33, D=32, causal=True), (16, 64), (16, 32)),
    'causal_gqa_3_33_d32_2sg': (dict(B=1, Hq=3, Hkv=1, Tq=33, Tk=33, D=32, causal=True), (32, 16), (32, 16)),
    'window_start_gqa_3_13_of_40_d48': (dict(B=2, Hq=3, Hkv=1, Tq=13, Tk=40, D=48, causal=True, window=5, start=17), (32, 32), (32, 16)),
    'bottom_right_7_of_30_d80_gqa5': (dict(B=1, Hq=5, Hkv=1, Tq=7, Tk=30, D=80, causal=True), (64, 32), (64, 32)),
    'tiny_gradient_d32': (dict(B=1, Hq=2, Hkv=1, Tq=20, Tk=20, D=32, causal=True, upstream=1e-6), (16, 64), (32, 16)),
}
for name in sys.argv[1:] or CASES:
    spec, (qbr, qbt), (kbr, kbt) = CASES[name]
    P, want = problem(**spec)
    dq = [math.nan] * len(want['dq']); dk = [math.nan] * len(want['dk']); dv = [math.nan] * len(want['dv'])
    grad_q(P, qbr, qbt, dq)
    grad_kv(P, kbr, kbt, dk, dv)
    print(name, 'dq %.2e dk %.2e dv %.2e' % (rel(dq, want['dq']), rel(dk, want['dk']), rel(dv, want['dv'])), flush=True)
