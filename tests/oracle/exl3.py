#!/usr/bin/python3
"""exl3.py: the oracle's own pack reader and EXL3 decoder, in NumPy.

Written from ../../../shared/reference/exl3-format.md (cited as "§n") and
the safetensors layout, not from tf's C: the oracle of issue 8 dequantises
every EXL3 group of a pack with this and runs the forward on dense weights.

  safetensors: u64 little-endian header length, a JSON header naming each
  tensor's dtype, shape and [begin, end) byte offsets in the data that
  follows; model.safetensors.index.json's weight_map names each tensor's
  shard (without it, every *.safetensors file of the folder is a shard).

Run `exl3.py selftest` to check the decoder against the format's test
vectors (§8): codebooks, tile states, decoded weights and FNV-1a hashes.
"""
import json
import os
import struct
import sys

import numpy as np

# ---- safetensors packs ----

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I16": np.int16,
          "I32": np.int32, "U8": np.uint8, "I64": np.int64, "F64": np.float64}


class Pack:
    """Tensors of a pack folder, read on demand (memory-mapped shards)."""

    def __init__(self, folder):
        self.folder = folder
        with open(os.path.join(folder, "config.json")) as f:
            self.config = json.load(f)
        self.where = {}
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                wm = json.load(f)["weight_map"]
            shards = sorted(set(wm.values()))
        else:
            wm = None
            shards = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
        for s in shards:
            path = os.path.join(folder, s)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
            for name, h in header.items():
                if name == "__metadata__" or (wm is not None and wm.get(name) != s):
                    continue
                self.where[name] = (data, h)

    def has(self, name):
        return name in self.where

    def raw(self, name):
        """The tensor as stored (BF16 as uint16 bits)."""
        data, h = self.where[name]
        b, e = h["data_offsets"]
        return np.frombuffer(data[b:e].tobytes(), dtype=DTYPES[h["dtype"]]).reshape(h["shape"])

    def dtype(self, name):
        return self.where[name][1]["dtype"]

    def f64(self, name):
        """The tensor's values as float64 (F32, F16 or BF16)."""
        v = self.raw(name)
        if self.dtype(name) == "BF16":
            return bf16_to_f32(v).astype(np.float64)
        return v.astype(np.float64)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round float32 to bf16 bits, nearest even (NaN kept quiet)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def bf(x):
    """x rounded to bf16, as float32."""
    return bf16_to_f32(f32_to_bf16(np.asarray(x, dtype=np.float32)))

# ---- EXL3 (§2-§5) ----


def codebook(cb, s):
    """fp16 weights of 16-bit states s (uint array) for codebook 0 3INST, 1 MCG, 2 MUL1 (§4)."""
    s = np.asarray(s, dtype=np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    if cb == 2:
        x = (s * np.uint64(0x83DCD12D)) & m32
        t = sum((x >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4))
        h = np.float32(1024) + t.astype(np.float32)
        k = np.float32(np.array([0x1EEE], dtype=np.uint16).view(np.float16)[0])
        c = np.float32(np.array([0xC931], dtype=np.uint16).view(np.float16)[0])
        return (h * k + c).astype(np.float16)
    if cb == 0:
        x = (s * np.uint64(89226354) + np.uint64(64248484)) & m32
    else:
        x = (s * np.uint64(0xCBAC1FED)) & m32
    x = (x & np.uint64(0x8FFF8FFF)) ^ np.uint64(0x3B603B60)
    lo = (x & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32)
    hi = (x >> np.uint64(16)).astype(np.uint16).view(np.float16).astype(np.float32)
    return (lo + hi).astype(np.float16)


def tile_states(tiles, bits):
    """States [T, 256] of tiles [T, 16*bits] (int16 or uint16 words), §2."""
    w = np.asarray(tiles).view(np.uint16).reshape(-1, 16 * bits)
    stream = w[:, np.arange(16 * bits) ^ 1]           # stream word m sits at index m XOR 1
    be = np.ascontiguousarray(stream.astype(">u2")).view(np.uint8).astype(np.uint32)
    nbytes = 32 * bits                                # the stream, MSB first, circular
    start = ((np.arange(256) + 1) * bits - 16) % (256 * bits)
    b0 = start >> 3
    three = (be[:, b0] << 16) | (be[:, (b0 + 1) % nbytes] << 8) | be[:, (b0 + 2) % nbytes]
    return (three >> (8 - (start & 7))) & 0xFFFF


def tile_pos():
    """Stream position t -> (r, c) within a tile (§3)."""
    t = np.arange(256)
    l, j = t >> 3, t & 7
    r = 2 * (l & 3) + (j & 1) + 8 * ((j >> 1) & 1)
    c = (l >> 2) + 8 * (j >> 2)
    return r, c


def decode(trellis, cb):
    """Ŵ [K, N] fp16 of a trellis [K/16, N/16, 16*bits]."""
    kt, nt, words = trellis.shape
    bits = words // 16
    st = tile_states(trellis.reshape(kt * nt, words), bits)
    w = codebook(cb, st).reshape(kt, nt, 256)
    r, c = tile_pos()
    out = np.zeros((kt, 16, nt, 16), dtype=np.float16)
    out[:, r, :, c] = w.transpose(2, 0, 1)
    return out.reshape(kt * 16, nt * 16)


_H128 = None


def hadamard128():
    global _H128
    if _H128 is None:
        i = np.arange(128)
        pc = np.vectorize(lambda v: bin(v).count("1"))(i[:, None] & i[None, :])
        _H128 = np.where(pc % 2 == 0, 1.0, -1.0) / np.sqrt(128.0)
    return _H128


def had_blocks_left(W):
    """Ĥ_K · W: each 128-row block of W mixed by Ĥ (a fast Walsh-Hadamard
    transform: butterflies on the pairs i, i + h for h = 1, 2, .. 64, which
    is Sylvester's natural order)."""
    K = W.shape[0]
    x = np.asarray(W, dtype=np.float64).reshape(K // 128, 128, -1)
    h = 1
    while h < 128:
        y = x.reshape(K // 128, 128 // (2 * h), 2, h, -1)
        x = np.stack([y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]], axis=2)
        h *= 2
    return x.reshape(W.shape) / np.sqrt(128.0)


def dequant(pack, prefix):
    """Dense W [K, N] float64 of group prefix: diag(suh)·Ĥ_K·Ŵ·Ĥ_N·diag(svh) (§5)."""
    tr = pack.raw(prefix + ".trellis")
    cb = 1 if pack.has(prefix + ".mcg") else 2 if pack.has(prefix + ".mul1") else 0
    What = decode(tr, cb).astype(np.float64)
    suh = pack.raw(prefix + ".suh").astype(np.float64)
    svh = pack.raw(prefix + ".svh").astype(np.float64)
    W = had_blocks_left(What)
    W = had_blocks_left(W.T).T                        # · Ĥ_N (Ĥ symmetric)
    return suh[:, None] * W * svh[None, :]

# ---- self-test against §8 ----


def lcg_words(n):
    s, out = 1, []
    for _ in range(n):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(s >> 16)
    return np.array(out, dtype=np.uint16)


def fnv(w16):
    h = 0x811C9DC5
    for byte in np.asarray(w16, dtype=np.uint16).astype("<u2").tobytes():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def hexbits(a):
    return " ".join("%04X" % v for v in np.asarray(a, dtype=np.float16).view(np.uint16).ravel())


class Mismatches:
    """A self-test's checks: check() prints each mismatch and counts it;
    done() prints the verdict and returns the exit status."""

    def __init__(self, name):
        self.name, self.bad = name, 0

    def check(self, what, got, want):
        if got != want:
            self.bad += 1
            print("MISMATCH %s: got %s, want %s" % (what, got, want))

    def done(self, agree):
        print("%s self-test: %s" % (self.name, "%d mismatches" % self.bad if self.bad else agree))
        return 1 if self.bad else 0


def selftest():
    t = Mismatches("exl3 oracle")
    check = t.check

    table = {0x0000: ("3A25", "3F60", "C2E8"), 0x0001: ("BB5B", "304E", "3921"),
             0x0002: ("3B74", "BA13", "B72D"), 0x1234: ("C066", "3E0F", "B89E"),
             0x8000: ("B7F8", "B915", "BAF2"), 0xABCD: ("B98E", "35E7", "BD42"),
             0xFFFF: ("B110", "3ACD", "B936")}
    for s, want in table.items():
        for cb in range(3):
            check("codebook %d state %04X" % (cb, s), hexbits(codebook(cb, [s])), want[cb])
    check("LCG words", hexbits(lcg_words(4).view(np.float16)), "3C88 5E88 8116 B473")
    states = {1: "785A F0B5 E16A C2D5", 2: "B909 E425 9097 425E", 3: "F002 8017 00BD 05E8",
              4: "5B65 B65E 65E8 5E88", 5: "DDEB BD7A AF44 E883", 6: "9E57 95E8 7A20 883C",
              7: "312F 97A2 D107 83C8", 8: "F55E 5E88 883C 3C88"}
    for b, want in states.items():
        st = tile_states(lcg_words(16 * b)[None, :], b)[0, :4]
        check("tile states b=%d" % b, " ".join("%04X" % v for v in st), want)
    # worked example of §2, b=4
    tile = np.zeros(64, dtype=np.uint16)
    tile[0], tile[1], tile[62] = 0x1234, 0xABCD, 0x0F0F
    st = tile_states(tile[None, :], 4)[0]
    check("worked example b=4", " ".join("%04X" % st[t] for t in (0, 1, 2, 3, 4, 5, 254, 255)),
          "F0FA 0FAB FABC ABCD BCD1 CD12 00F0 0F0F")
    small = {(2, 0): ("3FB2 3F63 B996 3C56", "B0EC", "9DE0", 0xBB5E73C9),
             (2, 1): ("3D55 AF3C 3849 BDE4", "BCDC", "33FA", 0x16899B56),
             (2, 2): ("3C15 BC26 3D15 3124", "B6DA", "B141", 0xE27283C6),
             (3, 0): ("3C95 3553 BD06 3381", "32FC", "3FA5", 0x2F2D6446),
             (3, 1): ("BCF8 3B9C B107 C1E7", "3A1C", "BC1F", 0x310CC7DA),
             (3, 2): ("2D15 28F7 352B 3BBA", "BEC6", "3990", 0x0CBBE543),
             (4, 0): ("3E76 346E 3C8B B0ED", "BC5D", "BD3B", 0x613220C7),
             (4, 1): ("BD85 3338 BC5E 3D10", "4076", "3EAD", 0xF2BB4A39),
             (4, 2): ("3771 3CAD BFC0 393D", "3B30", "1D12", 0x08FD1682)}
    for (b, cb), (w0, w10, w08, h) in small.items():
        W = decode(lcg_words(8 * 16 * b).reshape(1, 8, 16 * b), cb)
        check("Ŵ b=%d cb=%d [0][0..3]" % (b, cb), hexbits(W[0, :4]), w0)
        check("Ŵ b=%d cb=%d [1][0]" % (b, cb), hexbits(W[1, :1]), w10)
        check("Ŵ b=%d cb=%d [0][8]" % (b, cb), hexbits(W[0, 8:9]), w08)
        check("FNV b=%d cb=%d" % (b, cb), "%08X" % fnv(W.view(np.uint16)), "%08X" % h)
    big = {1: "B2ADD732 65932A4F 663ABCF5", 2: "3534105A C86B176B 51A60AB8",
           3: "F6C9057F 10E5A155 E675CA71", 4: "4BE9B1A0 779B8E0D 7BB4E5AE",
           5: "46F9189A AF9709BB 210E2823", 6: "29549A49 DCD77DB9 6DCF5A1E",
           7: "25094D12 D8F23ACD FC0368D7", 8: "870DD802 E552ADD7 66F45BA5"}
    for b, want in big.items():
        tr = lcg_words(3 * 16 * 16 * b).reshape(3, 16, 16 * b)
        got = " ".join("%08X" % fnv(decode(tr, cb).view(np.uint16)) for cb in range(3))
        check("FNV [3,16] b=%d" % b, got, want)
    H = hadamard128()
    check("Ĥ·Ĥ = I", bool(np.abs(H @ H - np.eye(128)).max() < 1e-12), True)
    M = np.arange(256 * 3, dtype=np.float64).reshape(256, 3) % 7 - 3
    check("fast Ĥ = Ĥ", bool(np.abs(had_blocks_left(M) - np.concatenate(
        [H @ M[:128], H @ M[128:]])).max() < 1e-12), True)
    return t.done("all vectors agree")


if __name__ == "__main__":
    if sys.argv[1:] == ["selftest"]:
        sys.exit(selftest())
    sys.stderr.write("usage: exl3.py selftest\n")
    sys.exit(64)
