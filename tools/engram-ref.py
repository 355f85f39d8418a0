#!/usr/bin/python3
"""engram-ref.py: an independent reference for tf's Engram hash.

Writes a hash fixture in the engram-hash-ref.bin layout (tf-engram(5)) from
a plain-Python reading of the rules, sharing no code with libcore: the
multipliers come from NumPy itself (default_rng(10007 * layer).integers),
the primes from a separate primality test, the hash from Python integers
wrapped to int64 by hand. The token map is synthetic (seeded), numbered by
first appearance like a real one; the fixture lists only the ids its cases
use. tests/unit/check_engram.c reads the output back and hashes it with
libcore.

Usage (needs /usr/bin/python3 with numpy):
  tools/engram-ref.py fixture OUT.bin      the hash fixture
  tools/engram-ref.py host OUT.bin         an engram-host.bin with the synthetic map
  tools/engram-ref.py hash [--lookback A,B] ID...
                                           rows as tf-engram-hash's text format
"""
import struct
import sys

import numpy as np

LAYERS = [1, 14]
NUM_EMBEDDINGS = [384006168, 384016682]
M = 4            # engram_max_ngram_size
HEADS = 8        # engram_n_heads
BASE = 16000000  # engram_vocab_size
VOCAB = 129280   # token ids
COMPRESSED = 99092
PAD_ID = 2


def is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def layout():
    used = set()
    primes, offsets = [], []
    for layer in LAYERS:
        ps = []
        for _order in range(2, M + 1):
            cur = BASE - 1
            for _h in range(HEADS):
                c = cur + 1
                while not is_prime(c) or c in used:
                    c += 1
                used.add(c)
                ps.append(c)
                cur = c
        offs, s = [], 0
        for p in ps:
            offs.append(s)
            s += p
        primes.append(ps)
        offsets.append(offs)
    return primes, offsets


def multipliers():
    bound = max(1, (np.iinfo(np.int64).max // COMPRESSED) // 2)
    out = []
    for layer in LAYERS:
        r = np.random.default_rng(10007 * layer).integers(0, bound, M, dtype=np.int64)
        out.append([int(x) * 2 + 1 for x in r])
    return out


def token_map():
    rng = np.random.default_rng(4242)
    keys = np.concatenate([np.arange(COMPRESSED), rng.integers(0, COMPRESSED, VOCAB - COMPRESSED)])
    rng.shuffle(keys)
    seen, m = {}, []
    for k in keys.tolist():
        m.append(seen.setdefault(k, len(seen)))
    assert len(seen) == COMPRESSED
    return m


def wrap64(x):
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >> 63 else x


def hash_rows(ids, lookback, tmap, mult, primes, offsets):
    full = list(lookback) + list(ids)
    nb = len(lookback)
    pad = tmap[PAD_ID]
    rows = []
    for t in range(len(ids)):
        for li in range(len(LAYERS)):
            rolling, blocked = 0, False
            cols = [0] * ((M - 1) * HEADS)
            for s in range(M):
                j = nb + t - s
                if j < 0 or full[j] >= VOCAB:
                    blocked = True
                v = pad if blocked else tmap[full[j]]
                rolling = wrap64(rolling ^ wrap64(v * mult[li][s]))
                if s >= 1:
                    for h in range(HEADS):
                        c = (s - 1) * HEADS + h
                        cols[c] = rolling % primes[li][c] + offsets[li][c]  # Python % floors
            rows.extend(cols)
    return rows


def write_host(out, mult, tmap):
    b = bytearray(b"DSV41EH1")
    b += struct.pack("<4I", len(LAYERS), M, VOCAB, COMPRESSED)
    b += struct.pack("<%dI" % len(LAYERS), *LAYERS)
    for m in mult:
        b += struct.pack("<%dq" % M, *m)
    b += struct.pack("<%dI" % VOCAB, *tmap)
    with open(out, "wb") as f:
        f.write(b)


def print_rows(args, mult, tmap, primes, offsets):
    lookback = []
    if args and args[0] == "--lookback":
        lookback = [int(x) for x in args[1].split(",")]
        args = args[2:]
    ids = [int(x) for x in args]
    rows = hash_rows(ids, lookback, tmap, mult, primes, offsets)
    per = len(LAYERS) * (M - 1) * HEADS
    for t in range(len(ids)):
        print(" ".join(str(r) for r in rows[t * per:(t + 1) * per]))
    print()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    primes, offsets = layout()
    mult = multipliers()
    tmap = token_map()
    if cmd == "host":
        write_host(args[0], mult, tmap)
    elif cmd == "hash":
        print_rows(args, mult, tmap, primes, offsets)
    elif cmd == "fixture":
        write_fixture(args[0], mult, tmap, primes, offsets)
    else:
        sys.exit("usage: engram-ref.py fixture|host|hash ...")


def write_fixture(out, mult, tmap, primes, offsets):
    assert primes[0][0] == 16000057 and primes[1][23] == 16000889
    assert offsets[0][23] == 368005705
    assert [sum(p) for p in primes] == NUM_EMBEDDINGS

    rng = np.random.default_rng(1401)
    ids = [int(x) for x in rng.integers(3, VOCAB, 37)]
    ids[5] = PAD_ID
    ids[9] = ids[8]
    lookback, window = ids[:2], ids[2:]
    cases = [(window, lookback), (window[:7], []), (window[7:], window[4:7]),
             # image positions (ids past the map) block in the window and the lookback
             ([5, VOCAB, 7, VOCAB + 100, 3, 4, 4, 4], [VOCAB + 1, 9])]

    used = sorted({i for c in cases for i in c[0] + c[1] if i < VOCAB} | {PAD_ID})
    b = bytearray(b"DSV41EH1")
    b += struct.pack("<4I", len(LAYERS), M, VOCAB, COMPRESSED)
    b += struct.pack("<%dI" % len(LAYERS), *LAYERS)
    for m in mult:
        b += struct.pack("<%dq" % M, *m)
    b += struct.pack("<I", len(used))
    for i in used:
        b += struct.pack("<2I", i, tmap[i])
    b += struct.pack("<I", len(cases))
    for w, lb in cases:
        b += struct.pack("<2I", len(w), len(lb))
        b += struct.pack("<%dI" % len(w), *w)
        b += struct.pack("<%dI" % len(lb), *lb)
        rows = hash_rows(w, lb, tmap, mult, primes, offsets)
        b += struct.pack("<%dq" % len(rows), *rows)
    with open(out, "wb") as f:
        f.write(b)


if __name__ == "__main__":
    main()
