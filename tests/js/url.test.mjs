import assert from "node:assert/strict";
import { test } from "node:test";

import { cliCommand, linkQuery, mistyped, readLink, tableCsv } from "../../docs/javascripts/calculator/url.js";

const KNOWN = ["preset", "heads", "kv-heads", "seq", "walk", "experts"];

test("a link's fields are read by calc's names; other parameters are ignored", () => {
  const { values, problems } = readLink("?walk=eager&experts=8&utm_source=x&fbclid=y", KNOWN);
  assert.deepEqual([...values], [["walk", "eager"], ["experts", "8"]]);
  assert.deepEqual(problems, []);
});

test("a parameter that looks like a field mistyped is ignored and said to be; a tracker's is not said", () => {
  const { values, problems } = readLink("?Seq=16&sequence=8192&micro_batch=2&utm_source=x&fbclid=y&h=adam", KNOWN);
  assert.deepEqual([...values], []);
  assert.deepEqual(problems.map((p) => p.name), ["Seq", "sequence"]);
  assert.match(problems[0].line, /“Seq” is not a setting here, and was ignored \(did you mean “seq”\?\)/);
  assert.match(problems[1].line, /did you mean “seq”/);
  assert.equal(mistyped("micro_batch", ["micro-batch"]), "micro-batch");
  assert.equal(mistyped("utm_source", ["seq", "preset"]), null);
  assert.equal(mistyped("share", ["shared-expert-ffn"]), null);  // a shorter word is no mistyped name
  assert.equal(mistyped("seq_len", ["seq", "seq-len-x"]), "seq");
});

test("a field given twice keeps its first value and says so", () => {
  const { values, problems } = readLink("?seq=1&seq=2", KNOWN);
  assert.equal(values.get("seq"), "1");
  assert.equal(problems.length, 1);
  assert.match(problems[0].message, /given 2 times; the first, “1”, is used/);
});

test("the address keeps every value that is not a default, and round-trips", () => {
  const query = linkQuery({ preset: "llama-7b", heads: "64", "kv-heads": "32", seq: "4096" }, { preset: "llama-7b", seq: "4096" });
  assert.equal(query, "heads=64&kv-heads=32");
  assert.deepEqual([...readLink(`?${query}`, KNOWN).values], [["heads", "64"], ["kv-heads", "32"]]);
});

test("the CLI's command gives the address's values as flags, switches as --name / --no-name, quoted for a shell", () => {
  assert.equal(cliCommand(""), "python -m calc");
  assert.equal(cliCommand("preset=gpt2&seq=512&tied=false&bias=true", ["tied", "bias"]),
    "python -m calc --preset gpt2 --seq 512 --no-tied --bias");
  assert.equal(cliCommand("finetune=lora&lora-targets=q%2Cv"), "python -m calc --finetune lora --lora-targets q,v");
  assert.equal(cliCommand("hf-config=%7B%22a%22%3A1%7D&walk=eager"), "python -m calc --hf-config config.json --walk eager");
  // a link's value may hold anything: it reaches the shell as one word, never as a command of its own
  assert.equal(cliCommand("seq=1%3B%20rm%20-rf%20~"), "python -m calc --seq '1; rm -rf ~'");
  assert.equal(cliCommand("seq=it's"), "python -m calc --seq 'it'\\''s'");
  // the capacity and the global batch are the planner's: the CLI's step refuses them
  assert.equal(cliCommand("capacity-gb=24&seq=512&global-batch=64", [], "config.json", ["capacity-gb", "global-batch"]),
    "python -m calc --seq 512");
});

test("a switch is said as calc reads its value: a link's ?flash=1 or ?qkv-bias=yes is on, 0 and no are off", () => {
  const switches = ["flash", "qkv-bias", "dropout"];
  assert.equal(cliCommand("flash=1&qkv-bias=yes&dropout=off", switches), "python -m calc --flash --qkv-bias --no-dropout");
  assert.equal(cliCommand("flash=TRUE&qkv-bias=0", switches), "python -m calc --flash --no-qkv-bias");
});

test("the table's CSV holds calc's integer bytes, a row a recipe, a label with a comma quoted", () => {
  const rows = [{ id: "mixed-none", label: "mixed-precision Adam, no recomputation", peak: 199539351552,
    bytes: { weights: 13476831232, logits: 786432000 } }];
  assert.equal(tableCsv(rows, ["weights", "logits"]),
    "recipe,label,weights_bytes,logits_bytes,peak_bytes\r\n" +
    'mixed-none,"mixed-precision Adam, no recomputation",13476831232,786432000,199539351552\r\n');
  assert.equal(tableCsv([{ ...rows[0], label: 'say "hi"' }], []).split("\r\n")[1], 'mixed-none,"say ""hi""",199539351552');
});
