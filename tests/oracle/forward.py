#!/usr/bin/python3
"""forward.py: the oracle's DeepSeek-V4.1 forward, in NumPy.

Written from ../../../shared/reference/dsv41-forward-spec.md (cited "§n")
and dsv41-model-facts.md (cited "facts §n"), not from tf's C. It loads a
pack (exl3.py reads the shards and dequantises the EXL3 groups), runs one
sequence's whole prefill (positions 0..R-1) and gives fp32 logits for
every position.

The arithmetic is float64 with the roundings the spec states applied
where it states them: bf16 after each Lin (§0), RMS and RoPE rows, the
mHC post and collapse (§3), attention outputs (§8), MoE branch (§10),
Engram streams (§11); the cache formats of facts §7 / spec §15 on write
(FP8 window and pool rows, FP8 index keys by default, or bf16 / FP4); and,
EXL3 groups as their dense W = diag(suh)·Ĥ·Ŵ·Ĥ·diag(svh) in float64 (what
tf's CPU backend computes with), or with --kernel the EXL3 GPU kernel's own
precision (exl3-format.md §5: x⊙suh rounded to fp16, the input Hadamard
rounded to fp16, then fp32 products).

Dimensions come from the pack's config.json, so the release's 512-wide
latent with a 64-dim RoPE tail is here head_dim with a qk_rope_head_dim
tail, 128 window rows are sliding_window, 512 selected rows index_topk,
and so on.

  forward.py PACK --ids 0,5,9 -o logits.npy [--fmt W,P,I] [--ids ... -o ...]...
             [--kv fp8|bf16] [--pool fp8|fp4|bf16] [--index fp8|bf16] [--kernel] [--f32]
             [--floor]
  forward.py selftest        (Engram primes and multipliers against facts §5)
  forward.py formats DRIVER DIM ROPE  (cache formats against `logits --quant`)
"""
import argparse
import importlib.util
import json
import math
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import exl3  # noqa: E402

# Engram's token map: the project's standalone reading of it.
_spec = importlib.util.spec_from_file_location("engram_map_ref",
                                               os.path.join(HERE, "..", "..", "tools", "engram-map-ref.py"))
ENGRAM_MAP = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ENGRAM_MAP)

F64 = np.float64


def bf(x):
    """Round to bf16 (nearest even), as float64 values."""
    return exl3.bf(np.asarray(x, dtype=np.float32)).astype(F64)


def f16(x):
    """Round to fp16 (nearest even), as float64 values."""
    return np.asarray(x, dtype=F64).astype(np.float16).astype(F64)


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=F64)))


def softplus(x):
    return np.logaddexp(0.0, x)

# ---- number formats of the cache (spec §15, facts §7) ----


def e4m3(v):
    """Round to FP8 E4M3 (bias 7, largest 448), nearest even, saturating."""
    v = np.asarray(v, dtype=F64)
    a = np.abs(v)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(e, -6)                       # subnormals: quantum 2^-9
    q = np.exp2(e - 3)
    r = np.round(a / q) * q                      # np.round: half to even
    return np.sign(v) * np.minimum(r, 448.0)


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1(v):
    """Round to FP4 E2M1 (largest 6), nearest even code, saturating."""
    v = np.asarray(v, dtype=F64)
    a = np.minimum(np.abs(v), 6.0)
    d = np.abs(a[..., None] - E2M1)
    best = d.min(axis=-1, keepdims=True)
    # ties: the even code (lower bit clear); codes are indices into E2M1
    cand = np.where(d == best, np.arange(8), 99)
    even = np.where(cand % 2 == 0, cand, 99).min(axis=-1)
    code = np.where(even < 99, even, cand.min(axis=-1))
    return np.sign(v) * E2M1[code]


def pow2_scale(amax, top):
    """2^e with e = ceil(log2(max(amax, 1e-4) / top))."""
    m = np.maximum(np.asarray(amax, dtype=F64), 1e-4) / top
    return np.exp2(np.ceil(np.log2(m)))


def row_fmt(x, fmt, rope):
    """A latent row [.., n] as stored and read back: the last `rope` values
    bf16, the rest FP8 in groups of 64 (or FP4 in groups of 16), each with
    its power-of-two scale; or all bf16."""
    x = np.asarray(x, dtype=F64)
    if fmt == "bf16":
        return bf(x)
    n = x.shape[-1]
    out = bf(x)
    group, top, q = (64, 448.0, e4m3) if fmt == "fp8" else (16, 6.0, e2m1)
    for g0 in range(0, n - rope, group):
        g1 = min(g0 + group, n - rope)
        v = x[..., g0:g1]
        s = pow2_scale(np.abs(v).max(axis=-1, keepdims=True), top)
        out[..., g0:g1] = q(v / s) * s
    return out


def ik_fmt(x, fmt):
    """An index key: FP8 with one power-of-two scale per row, or bf16."""
    x = np.asarray(x, dtype=F64)
    if fmt == "bf16":
        return bf(x)
    s = pow2_scale(np.abs(x).max(axis=-1, keepdims=True), 448.0)
    return e4m3(x / s) * s

# ---- Engram: token map, primes, multipliers, hash, rows (facts §5) ----


def token_map(tokenizer_path):
    """Token id -> compressed id, numbered in order of first appearance:
    tools/engram-map-ref.py's reading of the spec (tests/cli checks it
    against tf-engram-hash), as an array, and the number of ids."""
    with open(tokenizer_path, encoding="utf-8") as f:
        out, n = ENGRAM_MAP.token_map(json.load(f))
    return np.array(out, dtype=np.int64), n


def is_prime(n):
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13):
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in (2, 7, 61):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def engram_primes(vocab, n_layers, cols):
    """[layer][col] bucket sizes: from vocab - 1 upward, each column the
    next prime unused before it (layers in order, columns in order)."""
    out, p = [], vocab - 1
    for _ in range(n_layers):
        row = []
        for _ in range(cols):
            p += 1
            while not is_prime(p):
                p += 1
            row.append(p)
        out.append(row)
    return out


def engram_mults(layer, m, compressed):
    b = max(1, (2 ** 63 - 1) // compressed // 2)
    r = np.random.default_rng(10007 * layer).integers(0, b, m, dtype=np.int64)
    return [int(v) * 2 + 1 for v in r]


def wrap64(v):
    return (v + 2 ** 63) % 2 ** 64 - 2 ** 63


def engram_hash(cids, n_vocab_map, mults, primes, heads, pad):
    """Rows [R, (M-1)*heads] of the layer's table for compressed ids cids
    (-1: an id past the map). Positions before 0 and ids past the map block
    the n-gram from there on; a blocked step hashes pad."""
    R, M = len(cids), len(mults)
    offs = np.concatenate([[0], np.cumsum(primes)[:-1]])
    rows = np.zeros((R, (M - 1) * heads), dtype=np.int64)
    for t in range(R):
        rolling, blocked = 0, False
        for s in range(M):
            if t - s < 0 or cids[t - s] < 0:
                blocked = True
            v = pad if blocked else int(cids[t - s])
            rolling = wrap64(rolling ^ wrap64(v * mults[s]))
            if s >= 1:
                for h in range(heads):
                    c = (s - 1) * heads + h
                    rows[t, c] = rolling % primes[c] + offs[c]
    return rows


def e4m3_decode(b):
    b = np.asarray(b, dtype=np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 15
    m = b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * np.exp2(e - 7.0))
    v = np.where((b & 0x7F) == 0x7F, np.nan, v)
    return sign * v


def engram_rows(table, idx, width):
    """Rows idx [R, C] of a U8 [rows, 264] table: the first `width` values
    of each, bf16(e4m3 x 2^(scale-127)), columns concatenated -> [R, C*width]."""
    raw = table[idx.reshape(-1)]                      # [R*C, 264]
    vals = e4m3_decode(raw[:, :256])
    sc = raw[:, 256:264].astype(np.int64)
    mul = np.where(sc == 0, 0.0, np.exp2(sc - 127.0))
    v = bf(vals * np.repeat(mul, 32, axis=1))
    return v[:, :width].reshape(idx.shape[0], -1)

# ---- the model ----


class Oracle:
    def __init__(self, folder, kv="fp8", pool="fp8", index="fp8", kernel=False):
        self.pack = exl3.Pack(folder)
        self.folder = folder
        c = self.pack.config.get("text_config", self.pack.config)
        self.c = c
        self.kv_fmt, self.pool_fmt, self.ix_fmt, self.kernel = kv, pool, index, kernel
        self.D = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.H = c["num_attention_heads"]
        self.hd = c["head_dim"]
        self.rd = c["qk_rope_head_dim"]
        self.W = c["sliding_window"]
        self.eps = c["rms_norm_eps"]
        self.hc = c["hc_mult"]
        self.hc_eps = c["hc_eps"]
        self.hc_alpha = c["hc_post_alpha"]
        self.sink_iters = c["hc_sinkhorn_iters"]
        self.ratios = c["compress_ratios"]
        self.kv_src = c["kv_source_layer_ids"]
        self.ix_src = c["index_source_layer_ids"]
        self.cand_src = c["candidate_source_layer_id"]
        self.groups, self.dense = {}, {}
        self.f32 = False      # fp32 products of dense W: a second rounding path (noise floor)

    # -- weights --
    def native(self, name):
        return self.pack.f64(name)

    def group(self, name):
        g = self.groups.get(name)
        if g is None:
            p = self.pack
            cb = 1 if p.has(name + ".mcg") else 2 if p.has(name + ".mul1") else 0
            what = exl3.decode(p.raw(name + ".trellis"), cb).astype(F64)
            suh = p.raw(name + ".suh").astype(F64)
            svh = p.raw(name + ".svh").astype(F64)
            g = self.groups[name] = (what, suh, svh)
        return g

    def lin(self, x, name, out="bf16"):
        """x [R, K] (bf16 values) times the EXL3 group's W: the kernel's
        dense W (the spec's "an oracle may use dequantised W"), or with
        --kernel the EXL3 kernel's fp16 steps (exl3-format.md §5)."""
        what, suh, svh = self.group(name)
        R, K = x.shape
        if not self.kernel:
            W = self.dense.get(name)
            if W is None:
                W = exl3.had_blocks_left(exl3.had_blocks_left(what).T).T
                W = self.dense[name] = suh[:, None] * W * svh[None, :]
            if self.f32:
                y = np.asarray(x, dtype=np.float32) @ W.astype(np.float32)
            else:
                y = x @ W
        else:
            H = exl3.hadamard128()
            u = f16(np.asarray(x, dtype=np.float32) * suh.astype(np.float32))
            u = f16((u.reshape(R, K // 128, 128) @ H).reshape(R, K))
            a = u @ what
            N = a.shape[1]
            y = (a.reshape(R, N // 128, 128) @ H).reshape(R, N) * svh
        y = np.asarray(y, dtype=np.float32).astype(F64)
        return bf(y) if out == "bf16" else y

    def rms(self, x, w):
        x = np.asarray(x, dtype=F64)
        return bf(x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps) * w)

    # -- RoPE (§0) --
    def freqs(self, layer):
        rd = self.rd
        i = np.arange(rd // 2, dtype=F64)
        c = self.c
        if self.ratios[layer] == 0:
            return c.get("rope_theta", 1e4) ** (-2 * i / rd)
        theta = c.get("compress_rope_theta", 1.6e5)
        b = theta ** (-2 * i / rd)
        ys = c.get("rope_scaling") or {}
        if not ys:
            return b
        factor = ys["factor"]
        orig = ys["original_max_position_embeddings"]

        def corr(r):
            return rd * math.log(orig / (2 * math.pi * r)) / (2 * math.log(theta))
        lo = max(math.floor(corr(ys.get("beta_fast", 32))), 0)
        hi = min(math.ceil(corr(ys.get("beta_slow", 1))), rd - 1)
        ramp = np.clip((i - lo) / ((hi - lo) if hi > lo else 0.001), 0, 1)
        return b * (1 - ramp) + b / factor * ramp

    def rope(self, v, pos, f, inverse=False):
        """Rotate the last rd dims of v [..., n] in interleaved pairs; pos
        broadcasts against v's leading dims."""
        v = np.array(v, dtype=F64)
        n = v.shape[-1]
        phi = np.asarray(pos, dtype=F64)[..., None] * f
        if inverse:
            phi = -phi
        cos = np.cos(phi).astype(np.float32).astype(F64)
        sin = np.sin(phi).astype(np.float32).astype(F64)
        a = v[..., n - self.rd::2].copy()
        b = v[..., n - self.rd + 1::2].copy()
        v[..., n - self.rd::2] = a * cos - b * sin
        v[..., n - self.rd + 1::2] = a * sin + b * cos
        return v

    # -- mHC (§3) --
    def hc_site(self, X, pre_in, blk, site, norm):
        R, S, D = X.shape
        f = X.reshape(R, S * D)
        fn = self.native("%s.hc_%s_fn" % (blk, site))
        base = self.native("%s.hc_%s_base" % (blk, site))
        scale = self.native("%s.hc_%s_scale" % (blk, site))
        m = (f @ fn.T) / np.sqrt((f * f).mean(axis=1, keepdims=True) + self.eps)
        pre = sigmoid(scale[0] * m[:, 0:S] + base[0:S]) + self.hc_eps
        post = self.hc_alpha * sigmoid(scale[1] * m[:, S:2 * S] + base[S:2 * S])
        C = (scale[2] * m[:, 2 * S:] + base[2 * S:]).reshape(R, S, S)
        C = np.exp(C - C.max(axis=2, keepdims=True))
        C = C / C.sum(axis=2, keepdims=True) + self.hc_eps
        C = C / (C.sum(axis=1, keepdims=True) + self.hc_eps)
        for _ in range(self.sink_iters - 1):
            C = C / (C.sum(axis=2, keepdims=True) + self.hc_eps)
            C = C / (C.sum(axis=1, keepdims=True) + self.hc_eps)
        c = bf((pre_in[:, :, None] * X).sum(axis=1))
        x = self.rms(c, norm)
        return x, post, C, pre

    @staticmethod
    def hc_post(b, X, post, C):
        # X'_j = post_j b + sum_i C[i][j] X_i
        return bf(post[:, :, None] * b[:, None, :] + np.einsum("rij,rid->rjd", C, X))

    # -- selection helpers (§7) --
    @staticmethod
    def topk_idx(s, k):
        """Indices of the k largest of s (ties to the smaller index), ascending."""
        order = sorted(range(len(s)), key=lambda j: (-s[j], j))
        return sorted(order[:k])

    def note(self, what, layer, row, s, k):
        """Record how near a top-k choice came to another: the k-th best
        less the next, over the largest finite magnitude. Near ties are where
        two faithful roundings may choose differently; a tie of exact zeros
        (ReLU scores) is not one. A pinned +inf takes one of the k."""
        s = np.asarray(s, dtype=F64)
        k -= int(np.isposinf(s).sum())
        v = np.sort(s[np.isfinite(s)])[::-1]
        if 0 < k < len(v) and not (v[k - 1] == 0 and v[k] == 0):
            gap = (v[k - 1] - v[k]) / max(np.abs(v).max(), 1e-30)
            self.margins[row] = min(self.margins.get(row, np.inf), gap)

    def kv_source_of(self, layer):
        return max(x for x in self.kv_src if x <= layer)

    def ix_source_of(self, layer):
        return max(x for x in self.ix_src if x <= layer)

    # -- Engram (§11) --
    def engram_init(self, ids):
        c = self.c
        layers = c.get("engram_layer_ids", [])
        self.eng = {}
        if not layers:
            return
        M = c["engram_max_ngram_size"]
        heads = c["engram_n_heads"]
        cols = (M - 1) * heads
        tmap, n_keys = token_map(os.path.join(self.folder, "tokenizer.json"))
        # B of the multipliers divides by the compressed ids the map has
        # (99092 in the release, where it equals the config's count)
        compressed = n_keys
        pad = int(tmap[c.get("engram_pad_token_id", 2)])
        cids = np.array([tmap[i] if i < len(tmap) else -1 for i in ids])
        primes = engram_primes(c["engram_vocab_size"], len(layers), cols)
        for li, layer in enumerate(layers):
            rows = engram_hash(cids, len(tmap), engram_mults(layer, M, compressed),
                               primes[li], heads, pad)
            self.eng[layer] = rows

    def engram(self, X, layer, blk):
        table = self.pack.raw(blk + ".engram.table")
        e = engram_rows(table, self.eng[layer], self.c["engram_head_dim"])
        kv = self.lin(e, blk + ".engram.wkv")
        R, S, D = X.shape
        qk = self.native(blk + ".engram.q_weight") * self.native(blk + ".engram.k_weight")
        val = kv[:, S * D:]
        out = np.empty_like(X)
        for s in range(S):
            h = X[:, s]
            key = kv[:, s * D:(s + 1) * D]
            dot = (h * qk[s] * key).sum(axis=1)
            dot = dot / np.sqrt((h * h).mean(axis=1) + self.eps) \
                / np.sqrt((key * key).mean(axis=1) + self.eps) / math.sqrt(D)
            sg = np.where(dot < 0, -1.0, 1.0)
            gate = sigmoid(sg * np.sqrt(np.maximum(np.abs(dot), self.c.get("engram_gate_clamp", 1e-6))))
            out[:, s] = bf(h + gate[:, None] * val)
        return out

    # -- attention (§5-§9) --
    def attention(self, x, layer, blk, pos, st):
        R = x.shape[0]
        H, hd, W = self.H, self.hd, self.W
        r = self.ratios[layer]
        f = self.freqs(layer)
        qa = self.lin(x, blk + ".attn.wq_a")
        qn = self.rms(qa, self.native(blk + ".attn.q_norm.weight"))
        kv = self.lin(x, blk + ".attn.wkv")
        kvn = self.rms(kv, self.native(blk + ".attn.kv_norm.weight"))
        win = row_fmt(bf(self.rope(kvn, pos, f)), self.kv_fmt, self.rd)
        q = self.lin(qn, blk + ".attn.wq_b").reshape(R, H, hd)
        q = bf(self.rope(q, pos[:, None], f))

        if r > 0 and layer in self.kv_src:
            self.compress(x, layer, blk, pos, f, st)
        if r > 0 and layer in self.ix_src:
            self.select(x, qn, layer, blk, pos, st)

        sink = self.native(blk + ".attn.attn_sink")
        if r > 0:
            src = self.kv_source_of(layer)
            pool = st["pool"][src]
            sel = st["sel"][self.ix_source_of(layer)]
            rs = self.ratios[src]
        o = np.zeros((R, H, hd))
        for i in range(R):
            p = int(pos[i])
            keys = [win[j] for j in range(max(0, p - W + 1), p + 1)]
            if r > 0:
                for j in sel[i]:
                    assert j * rs + rs - 1 <= p
                    keys.append(pool[j])
            K = np.array(keys)                              # [n, hd]
            z = q[i] @ K.T / math.sqrt(hd)                   # [H, n]
            M = np.maximum(z.max(axis=1), sink)
            e = np.exp(z - M[:, None])
            w = e / (e.sum(axis=1) + np.exp(sink - M))[:, None]
            o[i] = w @ K
        o = bf(self.rope(o, pos[:, None], f, inverse=True))
        G = self.c["o_groups"]
        hg = H // G
        z = [self.lin(o[:, g * hg:(g + 1) * hg].reshape(R, hg * hd), "%s.attn.wo_a.slice.%d" % (blk, g))
             for g in range(G)]
        return self.lin(np.concatenate(z, axis=1), blk + ".attn.wo_b")

    def compress(self, x, layer, blk, pos, f, st):
        """Pool rows and index keys of a KV source (§6)."""
        r = self.ratios[layer]
        u = self.lin(x, blk + ".attn.compressor.wkv", out="f32")
        g = self.lin(x, blk + ".attn.compressor.wgate", out="f32") if r == 2 else None
        cnorm = self.native(blk + ".attn.compressor.norm.weight")
        knorm = self.native(blk + ".attn.indexer.k_norm.weight")
        pool, ik = st["pool"].setdefault(layer, {}), st["ik"].setdefault(layer, {})
        for i in range(len(pos)):
            p = int(pos[i])
            if (p + 1) % r:
                continue
            w = p // r
            if r == 2:
                assert i >= 1 and pos[i - 1] == p - 1
                g2 = np.stack([g[i - 1], g[i]])
                a = np.exp(g2 - g2.max(axis=0))
                a = a / a.sum(axis=0)
                pooled = a[0] * u[i - 1] + a[1] * u[i]
            else:
                pooled = u[i]
            lat = self.rms(pooled[None], cnorm)
            pool[w] = row_fmt(bf(self.rope(lat, [w * r], f)), self.pool_fmt, self.rd)[0]
            k = self.lin(lat, blk + ".attn.indexer.wk")
            k = self.rms(k, knorm)
            ik[w] = ik_fmt(bf(self.rope(k, [w * r], f)), self.ix_fmt)[0]

    def select(self, x, qn, layer, blk, pos, st):
        """sel(p) of an index source, and the candidate blocks (§7)."""
        c = self.c
        IH, ID, topk = c["index_n_heads"], c["index_head_dim"], c["index_topk"]
        R = x.shape[0]
        src = self.kv_source_of(layer)
        r = self.ratios[src]
        f = self.freqs(layer)
        iq = self.lin(qn, blk + ".attn.indexer.wq_b").reshape(R, IH, ID)
        iq = bf(self.rope(iq, pos[:, None], f))
        wp = self.native(blk + ".attn.indexer.weights_proj.weight")
        iw = x @ wp.T                                       # fp32 [R, IH]
        ik = st["ik"][src]
        sels, cands = [], []
        for i in range(R):
            p = int(pos[i])
            n = (p + 1) // r
            if n <= topk:
                sels.append(list(range(n)))
                cands.append(None)
                continue
            K = np.array([ik[j] for j in range(n)])         # [n, ID]
            dots = np.maximum(0.0, iq[i] @ K.T / math.sqrt(ID))  # [IH, n]
            s = ((iw[i] / math.sqrt(IH))[:, None] * dots).sum(axis=0)
            s = np.asarray(s, dtype=np.float32).astype(F64)
            if layer != src:                                 # reindex: candidate blocks
                cand = st["cand"][i]
                mask = np.full(n, -np.inf)
                bs = c["candidate_block_size"]
                for b in cand:
                    mask[b * bs:min((b + 1) * bs, n)] = 0.0
                s = s + mask
            sels.append(self.topk_idx(list(s), topk))
            self.note("select", layer, p, s, topk)
            if layer == self.cand_src:
                bs, nb = c["candidate_block_size"], c["candidate_topk_blocks"]
                nblk = (n + bs - 1) // bs
                B = [max(s[b * bs:min((b + 1) * bs, n)]) for b in range(nblk)]
                B[(n - 1) // bs] = np.inf
                cands.append(self.topk_idx(B, nb))
                self.note("blocks", layer, p, B, nb)
            else:
                cands.append(None)
        st["sel"][layer] = sels
        if layer == self.cand_src:
            st["cand"] = cands

    # -- MoE (§10) --
    def moe(self, x, blk):
        c = self.c
        lim = c.get("swiglu_limit", 10.0)
        gate = self.native(blk + ".ffn.gate.weight")
        bias = self.native(blk + ".ffn.gate.bias")
        E = gate.shape[0]
        k = c["num_experts_per_tok"]
        lg = np.asarray(x @ gate.T, dtype=np.float32).astype(F64)
        sc = np.sqrt(softplus(lg))
        R = x.shape[0]

        def expert(xr, pre):
            gt = self.lin(xr, pre + ".w1", out="f32")
            up = self.lin(xr, pre + ".w3", out="f32")
            gm = np.minimum(gt, lim)
            a = gm * sigmoid(gm) * np.clip(up, -lim, lim)
            return self.lin(bf(a), pre + ".w2", out="f32")

        routed = np.zeros((R, self.D))
        picks = []
        for i in range(R):
            order = sorted(range(E), key=lambda e: (-(sc[i, e] + bias[e]), e))[:k]
            picks.append(order)
            self.note("route", blk, i, sc[i] + bias, k)
        for e in range(E):
            rows = [i for i in range(R) if e in picks[i]]
            if not rows:
                continue
            y = expert(x[rows], "%s.ffn.experts.%d" % (blk, e))
            for n, i in enumerate(rows):
                tot = sum(sc[i, j] for j in picks[i])
                wgt = c.get("routed_scaling_factor", 1.5) * sc[i, e] / tot
                routed[i] += wgt * y[n]
        shared = expert(x, blk + ".ffn.shared_experts")
        return bf(routed + shared)

    # -- the whole prefill --
    def forward(self, ids):
        ids = [int(i) for i in ids]
        R = len(ids)
        pos = np.arange(R)
        S = self.hc
        emb = exl3.bf16_to_f32(self.pack.raw("embed.weight")[ids]).astype(F64)
        X = np.repeat(emb[:, None, :], S, axis=1)
        pre = np.zeros((R, S))
        pre[:, 0] = 1.0
        self.engram_init(ids)
        self.margins = {}
        st = {"pool": {}, "ik": {}, "sel": {}, "cand": None}
        for layer in range(self.L):
            blk = "layers.%d" % layer
            if layer in self.eng:
                X = self.engram(X, layer, blk)
            x, post, C, preA = self.hc_site(X, pre, blk, "attn",
                                            self.native(blk + ".attn_norm.weight"))
            a = self.attention(x, layer, blk, pos, st)
            X = self.hc_post(a, X, post, C)
            x, post, C, pre = self.hc_site(X, preA, blk, "ffn",
                                           self.native(blk + ".ffn_norm.weight"))
            X = self.hc_post(self.moe(x, blk), X, post, C)
        h = bf((pre[:, :, None] * X).sum(axis=1))
        hn = self.rms(h, self.native("norm.weight"))
        return self.lin(hn, "head", out="f32").astype(np.float32)

    def row_margins(self, R):
        """Per row, the smallest margin of its top-k choices (inf: none)."""
        return np.array([self.margins.get(r, np.inf) for r in range(R)])


def selftest():
    t = exl3.Mismatches("forward oracle")
    check = t.check
    pr = engram_primes(16000000, 2, 24)
    check("p[0][0]", pr[0][0], 16000057)
    check("p[1][23]", pr[1][23], 16000889)
    check("offset[0][23]", sum(pr[0][:23]), 368005705)
    check("sum p[0]", sum(pr[0]), 384006168)
    check("sum p[1]", sum(pr[1]), 384016682)
    check("mult layer 1", engram_mults(1, 4, 99092),
          [76632096046245, 4839876093313, 35959672319349, 73987337458391])
    check("mult layer 14", engram_mults(14, 4, 99092),
          [67716810739261, 51510806800915, 30921347202721, 82619226485591])
    pt = engram_primes(1000, 2, 4)
    check("tiny sums", [sum(pt[0]), sum(pt[1])], [4062, 4152])
    check("e4m3", list(e4m3([0.1, 447, 1 / 1024, 3 / 1024, -17.5])),
          [0.1015625, 448.0, 0.0, 0.00390625, -18.0])
    check("e2m1", list(e2m1([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 9, -0.3])),
          [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5])
    return t.done("all agree")


def formats(driver, dim, rope):
    """The cache formats against the C driver's (logits --quant): random
    rows over many magnitudes, exact ties of FP8 and FP4, zero groups;
    every value must come back bit for bit."""
    import subprocess
    import tempfile
    rng = np.random.default_rng(5)
    n = 2000
    x = rng.standard_normal((n, dim)) * np.exp2(rng.integers(-14, 9, (n, 1)))
    x[:200] = rng.integers(-64, 64, (200, dim)) / 16.0      # FP8 halfway points
    x[200:300] = rng.integers(-30, 30, (100, dim)) * 0.25   # FP4 halfway points
    x[300:350, :dim - rope] = 0.0
    x = x.astype(np.float32)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.f32"), os.path.join(tmp, "out.f32")
        x.tofile(src)
        for fmt in ("fp8", "fp4", "bf16", "ik-fp8", "ik-bf16"):
            subprocess.run([driver, "--quant", fmt, "--dim", str(dim), "--rope", str(rope),
                            src, dst], check=True)
            c = np.fromfile(dst, dtype=np.float32).reshape(n, dim).astype(F64)
            xin = x.astype(F64)
            o = ik_fmt(xin, fmt[3:]) if fmt.startswith("ik-") else row_fmt(xin, fmt, rope)
            rows = np.nonzero((c != o).any(axis=1))[0]
            print("format %-7s %d rows of %d, %s" % (fmt, n, dim,
                  "all equal" if not len(rows) else "%d rows differ" % len(rows)))
            bad |= len(rows) > 0
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["selftest"]:
        return selftest()
    if sys.argv[1:2] == ["formats"] and len(sys.argv) == 5:
        return formats(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    ap = argparse.ArgumentParser(description="NumPy DeepSeek-V4.1 forward: logits of a prefill")
    ap.add_argument("pack")
    ap.add_argument("--ids", required=True, action="append",
                    help="comma-separated token ids (positions 0..R-1); repeatable")
    ap.add_argument("-o", "--out", required=True, action="append",
                    help="logits [R, vocab] float32 .npy, one per --ids")
    ap.add_argument("--fmt", action="append",
                    help="WINDOW,POOL,INDEX formats of the matching --ids (else the options)")
    ap.add_argument("--kv", default="fp8", choices=["fp8", "bf16"], help="window rows")
    ap.add_argument("--pool", default="fp8", choices=["fp8", "fp4", "bf16"], help="pool rows")
    ap.add_argument("--index", default="fp8", choices=["fp8", "bf16"], help="index keys")
    ap.add_argument("--kernel", action="store_true",
                    help="the EXL3 kernel's fp16 activations instead of dense W")
    ap.add_argument("--f32", action="store_true",
                    help="fp32 products of dense W (another rounding path: the noise floor)")
    ap.add_argument("--floor", action="store_true",
                    help="also write OUT.f32.npy from the fp32 path (for compare.py --floor)")
    # OUT.margin.npy always: per row the smallest relative margin of its
    # routing, selection and candidate top-k choices (compare.py)
    a = ap.parse_args()
    if len(a.ids) != len(a.out) or (a.fmt and len(a.fmt) != len(a.ids)):
        ap.error("one -o (and one --fmt, if any) per --ids")
    o = Oracle(a.pack, kv=a.kv, pool=a.pool, index=a.index, kernel=a.kernel)
    o.f32 = a.f32
    for n, (ids, out) in enumerate(zip(a.ids, a.out)):
        ids = [int(t) for t in ids.split(",") if t]
        if a.fmt:
            f = a.fmt[n].split(",")
            if len(f) != 3 or f[0] not in ("fp8", "bf16") or f[1] not in ("fp8", "fp4", "bf16") \
                    or f[2] not in ("fp8", "bf16"):
                ap.error("bad --fmt %s" % a.fmt[n])
            o.kv_fmt, o.pool_fmt, o.ix_fmt = f
        np.save(out, o.forward(ids))
        np.save(re.sub(r"(\.npy)?$", ".margin.npy", out, count=1), o.row_margins(len(ids)))
        if a.floor:
            o.f32 = True
            np.save(re.sub(r"(\.npy)?$", ".f32.npy", out, count=1), o.forward(ids))
            o.f32 = a.f32
    return 0


if __name__ == "__main__":
    sys.exit(main())
