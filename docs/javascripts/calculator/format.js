// Text for people, from calc's numbers (pure: no DOM; tested by tests/js/format.test.mjs).
// Sizes prefer calc's own strings (the answer's "display" fields); sizeText is the one fallback, for the
// values calc's answer carries no string for (events, sweep points, axis labels).

const EN_US = new Intl.NumberFormat("en-US");  // one formatter, not a new one per call
export const formatInt = (n) => EN_US.format(typeof n === "bigint" ? n : Number(n));

// One decimal of bytes / unit, rounded half up on the integer (calc.units._fixed), as "1,234.5".
function fixed(bytes, unit) {
  const n = BigInt(bytes);
  const q = ((n < 0n ? -n : n) * 20n + unit) / (2n * unit);
  return `${n < 0n ? "-" : ""}${EN_US.format(q / 10n)}.${q % 10n}`;
}

// calc.units.format_size's rule, for the values calc's answer carries no string for (tests/test_units.py runs
// both over the same sizes): GB is the home unit; TB from 10,000 GB on (TB_FROM_GB); below what would show
// "0.1 GB", the largest smaller unit the size fills (MB from 1,000.0 kB, then kB, then bytes).
const KB = 10n ** 3n, MB = 10n ** 6n, GB = 10n ** 9n, TB = 10n ** 12n;
const TB_FROM_GB = 10_000n;
const tenths = (n, unit) => (n * 20n + unit) / (2n * unit);  // |n| in tenths of unit, rounded half up

// The unit a size of this many bytes reads in: {name, bytes} (bytes as a Number, for scaling a chart).
export function unitFor(bytes) {
  const n = BigInt(Math.round(Math.abs(Number(bytes))));
  if (tenths(n, GB) >= 10n * TB_FROM_GB) return { name: "TB", bytes: Number(TB) };
  if (n === 0n || tenths(n, GB) >= 1n) return { name: "GB", bytes: Number(GB) };
  if (tenths(n, KB) >= 10n * (MB / KB)) return { name: "MB", bytes: Number(MB) };
  return n >= KB ? { name: "kB", bytes: Number(KB) } : { name: "B", bytes: 1 };
}

// "110.7 GB", "2,348.0 TB", "0.8 GB", "286.2 kB", "512 B": one decimal (whole bytes below a kB), separators.
export function sizeText(bytes, unit = unitFor(bytes)) {
  if (unit.name === "B") return `${formatInt(bytes)} B`;
  return `${fixed(bytes, BigInt(unit.bytes))} ${unit.name}`;
}

// A device's capacity as "80 GB", "94.5 GB" or "1 MB": no ".0" where it is that many units exactly (80.04 GB
// reads "80.0 GB"), as calc.units.format_capacity.
export function capacityText(bytes) {
  const unit = unitFor(bytes);
  const text = sizeText(bytes, unit);
  return Number(bytes) % unit.bytes === 0 ? text.replace(/\.0 /, " ") : text;
}

// A value from a link or a field, quoted for a message, never more than 40 characters of it.
export function quote(value) {
  const text = String(value);
  return text.length <= 40 ? `“${text}”` : `“${text.slice(0, 40)}…” (${formatInt(text.length)} characters)`;
}

export const recomputeText = (policy) => (policy === "none" ? "no recomputation" : `${policy} recomputation`);

// A recipe's label ("mixed-precision Adam") for the optimizer the step uses, by its label (calc.optimizers):
// "mixed-precision 8-bit AdamW". config: the step's config (its finetune, absent for the deck's own step).
export function recipeText(label, config, optimizerLabels = {}) {
  const optimizer = config.finetune?.optimizer ?? "adamw";
  return optimizer === "adamw" ? label : label.replace(/\bAdamW?\b/, optimizerLabels[optimizer] ?? optimizer);
}
// Which walk gave the peak, said when it is not the deck's.
// Over several processes (calc.web.engine_text) the peak is the busiest rank's, which the words say.
export const walkText = (walk, engine) =>
  (!walk || walk === "deck" ? "" : `, as the ${walk} walk allocates it${engine ? ` on ${engine}` : ""},`);

// The step's fine-tuning as calc describes it (step.config.finetune, absent for the deck's own step). Training
// every parameter is said by the recipe's words alone (recipeText names its optimizer).
export function tuningText(tune, optimizerLabels = {}, tied = false) {
  if (!tune) return "";
  const paged = tune.paged ? " (paged)" : "";
  if (tune.mode === "full") return paged && `Every parameter trains, its optimizer state paged. `;
  const what = { lora: "LoRA", qlora: "QLoRA", freeze: "freezing" }[tune.mode] ?? tune.mode;
  // freeze: the embedding and the first N blocks (calc.finetune.Tuning), the embedding alone where N is 0; the
  // blocks alone under --no-freeze-embedding (tune.freeze_embedding false: the embedding trains)
  // --freeze-head (tune.freeze_head): the final norm and the head too (a `tied` head trains with a trained
  // embedding). Everything frozen is listed first.
  const blocks = (n) => `the first ${formatInt(n)} ${n === 1 ? "layer" : "layers"}`;
  const frozen = (n) => {
    const parts = [...(tune.freeze_embedding === false ? [] : ["the embedding"]), ...(n > 0 ? [blocks(n)] : []),
      ...(tune.freeze_head ? ["the final norm", ...(tied && tune.freeze_embedding === false ? [] : ["the head"])] : [])];
    const listed = parts.length === 1 && tune.freeze_embedding !== false ? "the embedding only"
      : parts.length < 2 ? parts.join("") : `${parts.slice(0, -1).join(", ")} and ${parts.at(-1)}`;
    return ` ${listed}${tune.freeze_embedding === false ? ", the embedding training" : ""}`;
  };
  // peft's all-linear on Qwen3-MoE or Mixtral (tune.moe_all_linear): the router and the experts too (calc.finetune)
  const converted = tune.moe_all_linear ? " (peft's all-linear: the router too, the experts' gate_up_proj at twice the rank)" : "";
  const detail = tune.mode === "lora" || tune.mode === "qlora" ? ` rank ${tune.rank} on ${tune.targets.join(", ")}${converted}`
    : tune.mode === "freeze" ? frozen(tune.freeze_layers) : "";
  return `Fine-tuning: ${what}${detail}, ${optimizerLabels[tune.optimizer] ?? tune.optimizer}${paged}. `;
}

// calc's messages name its CLI flags (--tp); the page names its own fields: “Tensor parallel”, and a switch's
// --no-tied “Head tied to embedding” off. A field with no control here (--head-size, --experts, --walk) is
// said as the setting a link gives (`?head-size=96`, link.js), once: no field here is there to look for.
// labelOf(name) is the form's label for a field, or null where the form has none; isField(name) whether calc
// has such a field at all (a flag that is none, or with isField left out, stays as it is). A flag after "the
// CLI's" (up to the next , ; : or bracket) is the command a reader would type there, and stays as it is ("or
// run the CLI's --tp 2 --walk eager").
const CLI_COMMAND = /the CLI's ([^,;:()]*)/g;
export function withLabels(message, labelOf, isField = () => false) {
  const named = new Set();
  const text = String(message);
  const commands = [...text.matchAll(CLI_COMMAND)].map((m) => [m.index, m.index + m[0].length]);
  return text.replace(/--([a-z][a-z0-9-]*)/g, (flag, name, at) => {
    if (commands.some(([start, end]) => start <= at && at < end)) return flag;
    const label = labelOf(name);
    if (label) return `“${label}”`;
    const off = name.startsWith("no-") && labelOf(name.slice(3));
    if (off) return `“${off}” off`;
    if (!isField(name)) return flag;
    if (named.has(name)) return `“${name}”`;
    named.add(name);
    return `“${name}” (no field here shows it; a link sets it: ?${name}=)`;
  });
}

// The fields a message of calc's names as flags ("each token goes to 1 to 8 experts (--experts)" -> ["experts"]).
export const flagsIn = (message) => [...String(message).matchAll(/--([a-z][a-z0-9-]*)/g)].map((m) => m[1]);

// Progress while the runtime downloads: "3.1 MB received", or "3.1 of 5.2 MB" when the total is known.
export function receivedText(received, total = 0) {
  const mb = (n) => (n / 1e6).toFixed(1);
  return total > 0 ? `${mb(Math.min(received, total))} of ${mb(total)} MB` : `${mb(received)} MB received`;
}
