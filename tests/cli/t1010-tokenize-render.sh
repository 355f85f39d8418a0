#!/usr/bin/env bash
# tf-tokenize render: every record of the DeepSeek-V4.1 template goldens,
# given to the program as it is (its fields are request extensions), prints
# the expected prompt byte for byte or is refused with the recorded reason
# (exit 65); --json gives the offsets; --ids gives ids that decode back to
# the prompt; bad requests and misuse.
. "$TF_TESTS/lib.sh"
data=$TF_TESTS/../data/dsv41

# Split the goldens into request / expected files, then render each.
node -e '
const fs = require("fs");
const lines = fs.readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean);
lines.forEach((l, i) => {
	const r = JSON.parse(l);
	fs.writeFileSync(`req${i}.json`, l);
	if (r.expected !== null) fs.writeFileSync(`want${i}.txt`, r.expected);
	else fs.writeFileSync(`err${i}.txt`, r.error.replace(/^ValueError: /, ""));
});
console.log(lines.length);' "$data/template.jsonl" >count
n=$(cat count)
[ "$n" -ge 200 ] || fail "only $n records"
texts=0 refusals=0
for ((i = 0; i < n; i++)); do
	run tf-tokenize render "req$i.json"
	if [ -f "want$i.txt" ]; then
		expect_rc 0
		cmp -s out "want$i.txt" || { cmp out "want$i.txt" >&2 || true; fail "record $i differs"; }
		texts=$((texts + 1))
	else
		expect_rc 65
		expect_one_line_err
		grep -qF -- "$(cat "err$i.txt")" err || { cat err >&2; fail "record $i: wrong refusal"; }
		refusals=$((refusals + 1))
	fi
done
echo "NOTE: $texts prompts equal, $refusals refusals as recorded"

# --json: the prompt with its history length and rewind point.
cat >req.json <<'REQ'
{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
 {"role": "user", "content": "Weather?"}], "reasoning_effort": "low"}
REQ
run tf-tokenize render --json req.json
expect_rc 0
expect_json 'j.thinking === true && j.prompt.endsWith("<｜Assistant｜><think>")'
expect_json 'Buffer.from(j.prompt).subarray(0, j.history_bytes).toString() + "<｜Assistant｜><think>" === j.prompt'
expect_json 'Buffer.from(j.prompt).subarray(j.rewind_bytes).toString() === "Weather?<｜Assistant｜><think>"'
expect_json 'j.prompt.includes("Reasoning Effort: 50 ")'

# A bare list of messages renders with the defaults; stdin works.
echo '[{"role": "user", "content": "a"}]' | run tf-tokenize render --json -
expect_rc 0
expect_json 'j.prompt === "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n<｜User｜>a<｜Assistant｜><think>"'

# --ids: the prompt's ids (a byte-level tokenizer with the V4.1 markers);
# the markers are single ids, and the ids decode back to the prompt.
node -e '
const fs = require("fs");
const t = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
t.pre_tokenizer = {type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false};
t.decoder = {type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true};
fs.writeFileSync("tok.json", JSON.stringify(t));' "$data/mini_tokenizer.json"
run tf-tokenize render -t tok.json --ids req.json
expect_rc 0
expect_out '^1000 1004 '
mv out ids.txt
run tf-tokenize decode -t tok.json ids.txt
expect_rc 0
tf-tokenize render req.json >prompt.txt
cmp -s out prompt.txt || fail "ids do not decode to the prompt"
run tf-tokenize render -t tok.json --ids --json req.json
expect_rc 0
expect_json 'j.ids[0] === 1000 && j.ids.includes(1005) && j.ids.includes(1006) && j.ids.at(-1) === 1007'

# Refusals and misuse.
echo '{"messages": [{"role": "user", "content": "a"}], "reasoning_effort": "huge"}' >bad.json
run tf-tokenize render bad.json
expect_rc 65
expect_err "reasoning_effort must be 1-100 or low / medium / high / max"
expect_no_out
echo '{"messages": [' >broken.json
run tf-tokenize render broken.json
expect_rc 65
expect_err "cannot read the request"
run tf-tokenize render --ids req.json
expect_rc 64
expect_err "no tokenizer"
run tf-tokenize render no-such-file.json
expect_rc 66
run tf-tokenize render --stream req.json
expect_rc 64
