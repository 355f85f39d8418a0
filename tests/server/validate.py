#!/usr/bin/env python3
# validate.py: the independent check of constrained replies: reads JSON
# lines {"schema": ..., "text": ...} on stdin and prints, per line, "ok" or
# the reason the text is not a JSON document valid under the schema
# (python3-jsonschema, the draft the schema names or 2020-12, formats
# checked). The grammar layer's code plays no part in it.
import json
import sys

import jsonschema

for line in sys.stdin:
    case = json.loads(line)
    try:
        doc = json.loads(case["text"])
    except ValueError as e:
        print(f"not JSON: {e}")
        continue
    cls = jsonschema.validators.validator_for(case["schema"], default=jsonschema.Draft202012Validator)
    errs = list(cls(case["schema"], format_checker=cls.FORMAT_CHECKER).iter_errors(doc))
    print("ok" if not errs else f"invalid: {errs[0].message}")
    sys.stdout.flush()
