#!/usr/bin/env bash
# tf-tokenize parse: every reply of the DeepSeek-V4.1 DSML goldens parsed
# whole gives the recorded reasoning, content and calls; parsed with
# --stream (any chunk size) the calls are the recorded stream calls, each
# call's argument fragments concatenate to its arguments, and ids are
# call_ + 24 hex; misuse.
. "$TF_TESTS/lib.sh"
data=$TF_TESTS/../data/dsv41

node - "$data/dsml.jsonl" <<'JS' || fail "parse differs from the goldens"
const fs = require("fs");
const { execFileSync } = require("child_process");
const lines = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean);
const id = /^call_[0-9a-f]{24}$/;
let bad = 0, calls = 0;
lines.forEach((l, i) => {
	const r = JSON.parse(l);
	fs.writeFileSync("reply.txt", r.text);
	fs.writeFileSync("tools.json", JSON.stringify(r.tools));
	const args = ["parse", "--mode", r.thinking ? "thinking" : "chat", "--tools", "tools.json", "reply.txt"];
	const whole = JSON.parse(execFileSync("tf-tokenize", args, { encoding: "utf8" }));
	const got = { reasoning: whole.reasoning, content: whole.content,
		      calls: whole.tool_calls.map(c => [c.function.name, c.function.arguments]) };
	if (JSON.stringify(got) !== JSON.stringify(r.parse) || !whole.tool_calls.every(c => id.test(c.id) && c.type === "function")) {
		if (bad++ < 3) console.error(`record ${i} whole:\n want ${JSON.stringify(r.parse)}\n got  ${JSON.stringify(got)}`);
	}
	calls += whole.tool_calls.length;
	const chunk = String(1 + (i % 7) * 3);
	const out = execFileSync("tf-tokenize", [...args.slice(0, -1), "--stream", "--chunk", chunk, "reply.txt"],
				 { encoding: "utf8" }).trim().split("\n").map(JSON.parse);
	const last = out.pop(), frags = [];
	for (const d of out)
		for (const c of d.tool_calls || []) {
			if (c.id !== undefined && (!id.test(c.id) || c.index !== frags.length)) bad++;
			if (c.id !== undefined) frags.push("");
			else frags[c.index] += c.function.arguments;
		}
	const sc = last.tool_calls.map(c => [c.function.name, c.function.arguments]);
	if (JSON.stringify(sc) !== JSON.stringify(r.stream_calls) || JSON.stringify(frags) !== JSON.stringify(sc.map(c => c[1]))) {
		if (bad++ < 3) console.error(`record ${i} stream (chunk ${chunk}):\n want ${JSON.stringify(r.stream_calls)}\n got  ${JSON.stringify(sc)} ${JSON.stringify(frags)}`);
	}
});
console.log(`NOTE: ${lines.length} replies parsed whole and streamed, ${calls} calls, ${bad} differences`);
process.exit(bad ? 1 : 0);
JS

# A reply in chat mode without tools is all content.
printf 'Hello </think> there' >r.txt
run tf-tokenize parse --mode chat r.txt
expect_rc 0
expect_json 'j.reasoning === "" && j.content === "Hello </think> there" && j.tool_calls.length === 0'
# Streamed a byte at a time: the deltas, then the assembled reply.
printf 'plan</think>Sure.' | run tf-tokenize parse --stream --chunk 1 -
expect_rc 0
[ "$(head -1 out)" = '{"reasoning_content":"p"}' ] || fail "first delta: $(head -1 out)"
[ "$(tail -1 out)" = '{"reasoning":"plan","content":"Sure.","tool_calls":[]}' ] || fail "last line: $(tail -1 out)"
# Tools from a request file ({"tools": [...]}); names match case-insensitively.
echo '{"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"properties": {"days": {"type": "integer"}}}}}]}' >req.json
printf '</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="Get_Weather">\n<｜DSML｜ parameter name="days" string="true">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>' >call.txt
run tf-tokenize parse --tools req.json call.txt
expect_rc 0
expect_json 'j.content === "" && j.tool_calls[0].function.name === "get_weather" && j.tool_calls[0].function.arguments === "{\"days\":3}"'
# A block spelt <｜DSML｜ tool_calls> (with a space) cut by the chunks: the
# reference's holdback lets part of the tag into the content; --consistent
# keeps it out.
printf 'a\n\n<｜DSML｜ tool_calls>\n<｜DSML｜ invoke name="f">' >spaced.txt
echo '[{"name": "f"}]' >f.json
run tf-tokenize parse --mode chat --tools f.json --stream --chunk 3 spaced.txt
expect_rc 0
tail -1 out | grep -qF '"content":"a\n\n<｜DSML｜ tool_call"' || fail "reference holdback: $(tail -1 out)"
run tf-tokenize parse --mode chat --tools f.json --stream --consistent --chunk 3 spaced.txt
expect_rc 0
tail -1 out | grep -qF '"content":"a","tool_calls":[{"id":"call_' || fail "--consistent: $(tail -1 out)"
# Misuse.
run tf-tokenize parse --tools no-such.json call.txt
expect_rc 66
echo '5' >five.json
run tf-tokenize parse --tools five.json call.txt
expect_rc 65
expect_err "not a list of tools"
run tf-tokenize parse --mode sideways call.txt
expect_rc 64
run tf-tokenize parse --stream --chunk 0 call.txt
expect_rc 64
run tf-tokenize encode --tools req.json call.txt
expect_rc 64
