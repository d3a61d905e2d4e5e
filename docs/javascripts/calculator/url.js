// The address: a link holds every value that differs from the defaults (pure; tests/js/url.test.mjs).
import { quote } from "./format.js";
import { parseBool } from "./values.js";

// The fields a query string sets, by calc's field names (`known`, from the page's config): parameters that are
// not fields (utm_source, fbclid...) are ignored, but one that looks like a field mistyped (`mistyped`: "Seq",
// "sequence") is said to be, with its line; a field given twice keeps its first value and says so.
// -> {values: Map(name -> raw string), problems: [{name, message} or {name, line}]}
export function readLink(search, known) {
  const names = new Set(known);
  const values = new Map();
  const counts = new Map();
  const problems = [];
  for (const [key, value] of new URLSearchParams(search)) {
    if (!names.has(key)) {
      const meant = mistyped(key, known);
      if (meant && !problems.some((p) => p.name === key)) {
        problems.push({ name: key, line: `${quote(key)} is not a setting here, and was ignored (did you mean ${quote(meant)}?).` });
      }
      continue;
    }
    counts.set(key, (counts.get(key) ?? 0) + 1);
    if (!values.has(key)) values.set(key, value);
  }
  for (const [key, n] of counts) {
    if (n > 1) problems.push({ name: key, message: `given ${n} times; the first, ${quote(values.get(key))}, is used` });
  }
  return { values, problems };
}

// The field a link's parameter `key` that is none looks like a mistyping of, or null: the same name in other
// letters' case or with _ for - ("Seq", "micro_batch"), or a longer word that starts with a name of at least 3
// letters ("sequence", "seq_len"); a tracker's parameter (utm_source, fbclid) starts with none.
export function mistyped(key, known) {
  const k = key.toLowerCase().replaceAll("_", "-");
  return known.find((name) => name === k) ?? known.find((name) => name.length >= 3 && k.startsWith(name)) ?? null;
}

// The query string for inputs calc answered: every value that is not the form's default.
export function linkQuery(given, defaults) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(given)) {
    if (!Object.hasOwn(defaults, key) || value !== defaults[key]) params.set(key, value);
  }
  return params.toString();
}

// The command that gives the same answer in the CLI, from the address's query (linkQuery's: the values that
// differ from the defaults): `python -m calc` and a flag each, a switch (`switches`) as --name or --no-name (its
// value read as calc reads one: a link's ?flash=1 or ?qkv-bias=yes is on), the
// config.json as the file the reader saves it to (the CLI reads a file), a value quoted for a POSIX shell where
// it holds anything but letters, digits and , . : + - _ / (a link's value may hold anything). The fields only
// the planner and the fit list read (`rowsOnly`: the capacity, the global batch) are left out: the CLI's step
// refuses them.
const SHELL_SAFE = /^[A-Za-z0-9,.:+_/-]+$/;
const shellQuote = (value) => (SHELL_SAFE.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`);
export function cliCommand(query, switches = [], config = "config.json", rowsOnly = []) {
  const words = ["python", "-m", "calc"];
  const on = new Set(switches);
  for (const [name, value] of new URLSearchParams(query)) {
    if (rowsOnly.includes(name)) continue;
    if (name === "hf-config") words.push("--hf-config", config);
    else if (on.has(name)) words.push(parseBool(value) ? `--${name}` : `--no-${name}`);  // calc's yes, 1, on...
    else words.push(`--${name}`, shellQuote(value));
  }
  return words.join(" ");
}

// The recipes' table as CSV (RFC 4180: a field holding a comma, a quote or a line break is quoted, its quotes
// doubled), one row a recipe, its bytes as integers (calc's, never rounded): recipe id, label, each category
// in `categories`' order, peak.
const csvField = (value) => (/[",\r\n]/.test(String(value)) ? `"${String(value).replaceAll('"', '""')}"` : String(value));
export function tableCsv(rows, categories) {
  const lines = [["recipe", "label", ...categories.map((c) => `${c}_bytes`), "peak_bytes"]];
  for (const row of rows) lines.push([row.id, row.label, ...categories.map((c) => row.bytes[c]), row.peak]);
  return lines.map((line) => line.map(csvField).join(",")).join("\r\n") + "\r\n";
}
