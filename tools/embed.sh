#!/bin/sh
# embed.sh NAME FILE: a C source defining const unsigned char NAME[] with the
# bytes of FILE (aligned for the CUDA module loader) and size_t NAME_len.
set -e
printf '#include <stddef.h>\n__attribute__((aligned(64))) const unsigned char %s[] = {\n' "$1"
od -An -v -tx1 "$2" | sed 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'
printf '};\nconst size_t %s_len = sizeof(%s);\n' "$1" "$1"
