#!/usr/bin/python3
"""mkst.py FILE HEADER [DATA_BYTES] [--len N]: write a raw safetensors file
with this exact header text (for malformed-input tests); --len overrides the
header length field."""
import struct
import sys

args = sys.argv[1:]
length = None
if "--len" in args:
    i = args.index("--len")
    length = int(args[i + 1])
    del args[i:i + 2]
path, header = args[0], args[1].encode("utf-8", "surrogateescape")
data = int(args[2]) if len(args) > 2 else 0
if header.startswith(b"@hex:"):
    header = bytes.fromhex(header[5:].decode())
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header) if length is None else length))
    f.write(header)
    f.write(bytes(i % 251 for i in range(data)))
