#!/usr/bin/python3
"""engram-map-ref.py: an independent reading of Engram's token map.

Reads a byte-level BPE tokenizer.json with nothing but the Python standard
library (the GPT-2 byte alphabet, unicodedata for NFKC/NFD and categories)
and prints the compressed id of every token id, one per line, after a first
line "vocab compressed". tests/cli compares it with the map tf-engram-hash
writes. Python's Unicode tables (unicodedata.unidata_version) may be older
than utf8proc's: a difference in a character added since shows up as a
mismatch naming that id.

Usage: tools/engram-map-ref.py TOKENIZER.json
"""
import json
import re
import sys
import unicodedata

WHITE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {
    chr(c) for c in range(0x2000, 0x200B)}


def byte_alphabet():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[chr(b)] = b
        else:
            out[chr(256 + n)] = b
            n += 1
    return out


def normalize(text):
    s = unicodedata.normalize("NFKC", text)
    s = unicodedata.normalize("NFD", s)
    s = "".join(c for c in s if unicodedata.category(c) not in ("Mn", "Mc", "Me"))
    s = "".join(c.lower() for c in s)
    s = re.sub(r"[ \t\r\n]+", " ", s)
    if s == " ":
        s = "\ue000"
    a, b = 0, len(s)
    while a < b and s[a] in WHITE:
        a += 1
    while b > a and s[b - 1] in WHITE:
        b -= 1
    return s[a:b].replace("\ue000", " ")


def token_map(tj):
    """The compressed id of every token id of the parsed tokenizer.json tj,
    as a list, and the number of compressed ids."""
    chars = byte_alphabet()
    pieces = {i: k for k, i in tj["model"]["vocab"].items()}
    for a in tj.get("added_tokens", []):
        pieces[a["id"]] = a["content"]
    vocab = max(pieces) + 1
    seen, out = {}, []
    for i in range(vocab):
        raw = pieces.get(i)
        if raw is None:
            data = b""
        elif all(c in chars for c in raw):
            data = bytes(chars[c] for c in raw)
        else:
            data = raw.encode("utf-8")
        text = data.decode("utf-8", errors="replace")
        if "\ufffd" in text:
            key = raw
        else:
            key = normalize(text) or text
        out.append(seen.setdefault(key, len(seen)))
    return out, len(seen)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        out, n = token_map(json.load(f))
    print(len(out), n)
    sys.stdout.write("".join("%d\n" % v for v in out))


if __name__ == "__main__":
    main()
