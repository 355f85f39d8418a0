#!/usr/bin/env bash
# text-chat.sh: DeepSeek-V4.1 chat rendering and DSML reading speed on the
# CPU, with anchors from the same run: `tf-tokenize render` of a long
# conversation (2,000 turns with tool calls) against node's JSON.parse +
# JSON.stringify of the same request; `tf-tokenize parse` of a long reply
# (about 2.8 MB: reasoning, content, 200 calls with large parameters) whole,
# against the same reply streamed in 4-byte chunks (a token's worth), which
# must cost about the same (each push reads its own text only).
set -euo pipefail
bin=${TF_BIN:?}
work=$(mktemp -d /tmp/tf-bench-chat.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
node -e '
const fs = require("fs");
const msgs = [{role: "system", content: "You are helpful. ".repeat(50)}];
for (let i = 0; i < 500; i++) {
	msgs.push({role: "user", content: `Question ${i}: ` + "what is the weather like? ".repeat(20)});
	msgs.push({role: "assistant", reasoning_content: "Think. ".repeat(100), content: "",
		   tool_calls: [{id: `c${i}`, type: "function", function: {name: "get_weather",
		   arguments: JSON.stringify({city: "Paris", days: i % 7, tags: ["a", "b", i]})}}]});
	msgs.push({role: "tool", tool_call_id: `c${i}`, content: "18C sunny. ".repeat(30)});
	msgs.push({role: "assistant", reasoning_content: "Done. ".repeat(50), content: "It is sunny. ".repeat(20)});
}
const tools = [{type: "function", function: {name: "get_weather", description: "Weather",
		parameters: {type: "object", properties: {city: {type: "string"}, days: {type: "integer"},
		tags: {type: "array"}}}}}];
fs.writeFileSync("req.json", JSON.stringify({messages: msgs, tools}));
fs.writeFileSync("tools.json", JSON.stringify(tools));
let r = "Let me think about this carefully. ".repeat(40000) + "</think>Here you go.\n\n<｜DSML｜ calls>\n";
for (let i = 0; i < 200; i++)
	r += `<｜DSML｜ invoke name="get_weather">\n<｜DSML｜ parameter name="city" string="true">` +
	     "Paris ".repeat(1000) + `</｜DSML｜ parameter>\n<｜DSML｜ parameter name="tags" string="false">` +
	     JSON.stringify(Array.from({length: 200}, (_, k) => k)) + `</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n`;
fs.writeFileSync("reply.txt", r + "</｜DSML｜ calls>");'
size() { stat -c %s "$1"; }
best() { # best of 3 wall seconds of a command
	local b=
	for _ in 1 2 3; do
		local t0 t1
		t0=$(date +%s.%N)
		"$@" >/dev/null
		t1=$(date +%s.%N)
		b=$(echo "$t1 - $t0" | bc -l | awk -v b="$b" '{ if (b == "" || $1 < b) print $1; else print b }')
	done
	echo "$b"
}
req=$(size req.json)
t=$(best "$bin/tf-tokenize" render req.json)
a=$(best node -e 'const fs=require("fs"); JSON.stringify(JSON.parse(fs.readFileSync("req.json","utf8")))')
prompt=$("$bin/tf-tokenize" render req.json | wc -c)
echo "render: request $req bytes -> prompt $prompt bytes in $t s ($(echo "$req / $t / 1000000" | bc -l | cut -c1-5) MB/s of request);" \
	"anchor node JSON.parse+stringify $a s"
rep=$(size reply.txt)
w=$(best "$bin/tf-tokenize" parse --tools tools.json reply.txt)
s=$(best "$bin/tf-tokenize" parse --tools tools.json --stream --chunk 4 reply.txt)
echo "parse: reply $rep bytes whole in $w s ($(echo "$rep / $w / 1000000" | bc -l | cut -c1-5) MB/s);" \
	"streamed in 4-byte chunks $s s ($(echo "$rep / $s / 1000000" | bc -l | cut -c1-5) MB/s, $(echo "$rep / 4" | bc) pushes)"
