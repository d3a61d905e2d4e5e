// node --test tests/js/: the calculator's pure modules, without a browser.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  capacityText, flagsIn, quote, receivedText, recipeText, sizeText, tuningText, unitFor, walkText, withLabels,
} from "../../docs/javascripts/calculator/format.js";

test("sizes read in the unit their magnitude suits, with separators, rounded half up", () => {
  assert.equal(sizeText(110_700_000_000), "110.7 GB");
  assert.equal(sizeText(1_283_750_000_000), "1,283.8 GB");
  assert.equal(sizeText(2_348_000_000_000_000), "2,348.0 TB");
  assert.equal(sizeText(286_208), "286.2 kB");  // the course's Decoder, not "0.0 GB"
  assert.equal(sizeText(1_500_000), "1.5 MB");
  assert.equal(sizeText(512), "512 B");
  assert.equal(sizeText(-1_250_000_000), "-1.3 GB");
});

test("the unit changes at its threshold, TB only from 10,000 GB on", () => {
  assert.equal(unitFor(999).name, "B");
  assert.equal(unitFor(1000).name, "kB");
  assert.equal(unitFor(9_999_000_000_000).name, "GB");
  assert.equal(unitFor(10 ** 13).name, "TB");
});

test("a capacity drops a trailing .0, and a tiny one is not 0 GB", () => {
  assert.equal(capacityText(80e9), "80 GB");
  assert.equal(capacityText(94.5e9), "94.5 GB");
  assert.equal(capacityText(1e6), "1 MB");
  assert.equal(capacityText(80.04e9), "80.0 GB");  // not exact: one decimal, as calc.units.format_capacity
});

test("calc's flags become the form's labels; a field with no control is said as a link's setting, once", () => {
  const labels = { tp: "Tensor parallel", "grad-accum": "Micro-batches per step", tied: "Head tied to embedding" };
  const labelOf = (n) => labels[n] ?? null;
  const fields = new Set([...Object.keys(labels), "walk", "experts", "dense-layers", "bias", "head-size"]);
  const isField = (n) => fields.has(n);
  const said = withLabels("leave --tp, --grad-accum and --walk unset", labelOf, isField);
  assert.equal(said, "leave “Tensor parallel”, “Micro-batches per step” and “walk” (no field here shows it; a " +
    "link sets it: ?walk=) unset");
  assert.equal(withLabels("give --experts and no --dense-layers; --experts is 0", labelOf, isField),
    "give “experts” (no field here shows it; a link sets it: ?experts=) and no “dense-layers” (no field here " +
    "shows it; a link sets it: ?dense-layers=); “experts” is 0");
  assert.equal(withLabels("give --no-tied and --bias too", labelOf, isField),
    "give “Head tied to embedding” off and “bias” (no field here shows it; a link sets it: ?bias=) too");
  assert.doesNotMatch(withLabels("heads do not divide the width (or give --head-size)", labelOf, isField), /--/);
  // a flag that is no field of calc's (or no isField given) stays as it is
  assert.equal(withLabels("--planner and --walk", labelOf), "--planner and --walk");
  assert.equal(withLabels("--planner stays", labelOf, isField), "--planner stays");
  // a command the reader would type in the CLI stays a command (issue 33: "or run the CLI's “walk” (no field...")
  assert.equal(withLabels("choose it under --tp, or run the CLI's --tp 2 --walk eager; --tp is 1", labelOf, isField),
    "choose it under “Tensor parallel”, or run the CLI's --tp 2 --walk eager; “Tensor parallel” is 1");
  assert.equal(withLabels("or run the CLI's --walk eager", labelOf, isField), "or run the CLI's --walk eager");
});

test("a long value is quoted cut, with its length", () => {
  assert.equal(quote("abc"), "“abc”");
  assert.match(quote("x".repeat(5000)), /^“x{40}…” \(5,000 characters\)$/);
});

test("bytes received are said with or without a known total", () => {
  assert.equal(receivedText(3_140_000), "3.1 MB received");
  assert.equal(receivedText(3_140_000, 5_200_000), "3.1 of 5.2 MB");
});

test("the fields a message names are its flags, each whole", () => {
  assert.deepEqual(flagsIn("each token goes to 1 to 8 experts (--experts), got 0"), ["experts"]);
  assert.deepEqual(flagsIn("--experts-per-token beside --walk eager"), ["experts-per-token", "walk"]);
  assert.deepEqual(flagsIn("must be at least 1, got 0"), []);
});

test("the summary names the optimizer by its label, and says fine-tuning only where some parameters do not train", () => {
  const labels = { "adamw-8bit": "AdamW 8-bit (bitsandbytes)", lion: "Lion" };
  const full = { mode: "full", optimizer: "adamw-8bit", paged: false };
  assert.equal(recipeText("mixed-precision Adam", { finetune: full }, labels), "mixed-precision AdamW 8-bit (bitsandbytes)");
  assert.equal(recipeText("mixed-precision Adam", {}, labels), "mixed-precision Adam");
  assert.equal(tuningText(full, labels), "");  // not "Fine-tuning: every parameter, adamw-8bit."
  assert.match(tuningText({ ...full, paged: true }, labels), /^Every parameter trains, its optimizer state paged\. $/);
  const lora = { mode: "lora", optimizer: "lion", rank: 8, targets: ["q", "v"], paged: false };
  assert.equal(tuningText(lora, labels), "Fine-tuning: LoRA rank 8 on q, v, Lion. ");
  // peft's all-linear on Qwen3-MoE or Mixtral: what peft adapts beyond the targets' names is said
  const moe = { ...lora, targets: ["q", "k", "v", "o", "gate", "up", "down"], moe_all_linear: true };
  assert.match(tuningText(moe, labels), /on q, k, v, o, gate, up, down \(peft's all-linear: the router too, the experts' gate_up_proj at twice the rank\), Lion\. $/);
});

test("freezing says what is frozen: the embedding, and the first layers where there are any", () => {
  const tune = (n) => tuningText({ mode: "freeze", freeze_layers: n, optimizer: "adamw" }, { adamw: "AdamW" });
  assert.equal(tune(0), "Fine-tuning: freezing the embedding only, AdamW. ");
  assert.equal(tune(1), "Fine-tuning: freezing the embedding and the first 1 layer, AdamW. ");
  assert.equal(tune(20), "Fine-tuning: freezing the embedding and the first 20 layers, AdamW. ");
  // --no-freeze-embedding (issue 34): the blocks alone, the embedding training
  const trained = tuningText({ mode: "freeze", freeze_layers: 2, freeze_embedding: false, optimizer: "adamw" },
    { adamw: "AdamW" });
  assert.equal(trained, "Fine-tuning: freezing the first 2 layers, the embedding training, AdamW. ");
  // --freeze-head (issue 32, LLaMA-Factory's freeze): the final norm and an untied head frozen too
  const head = (n, more = {}) => tuningText({ mode: "freeze", freeze_layers: n, freeze_head: true, optimizer: "adamw",
    ...more }, { adamw: "AdamW" });
  assert.equal(head(2), "Fine-tuning: freezing the embedding, the first 2 layers, the final norm and the head, AdamW. ");
  assert.equal(head(0), "Fine-tuning: freezing the embedding, the final norm and the head, AdamW. ");
  assert.equal(head(2, { freeze_embedding: false }),
    "Fine-tuning: freezing the first 2 layers, the final norm and the head, the embedding training, AdamW. ");
  const tied = tuningText({ mode: "freeze", freeze_layers: 2, freeze_head: true, freeze_embedding: false,
    optimizer: "adamw" }, { adamw: "AdamW" }, true);  // a tied head trains with the embedding
  assert.equal(tied, "Fine-tuning: freezing the first 2 layers and the final norm, the embedding training, AdamW. ");
});

test("the walk is said where it is not the deck's, and over several processes whose rank the peak is", () => {
  assert.equal(walkText("deck", "the busiest of 4 ranks of DDP"), "");
  assert.equal(walkText("eager"), ", as the eager walk allocates it,");
  assert.equal(walkText("eager", "the busiest of 4 ranks of DDP (rank 0; every rank 1.0 GB)"),
    ", as the eager walk allocates it on the busiest of 4 ranks of DDP (rank 0; every rank 1.0 GB),");
});
