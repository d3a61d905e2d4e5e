// The address: a link holds every value that differs from the defaults (pure; tests/js/url.test.mjs).
import { quote } from "./format.js";

// The fields a query string sets, by calc's field names (`known`, from the page's config): parameters that are
// not fields (utm_source, fbclid...) are ignored; a field given twice keeps its first value and says so.
// -> {values: Map(name -> raw string), problems: [{name, message}]}
export function readLink(search, known) {
  const names = new Set(known);
  const values = new Map();
  const counts = new Map();
  for (const [key, value] of new URLSearchParams(search)) {
    if (!names.has(key)) continue;
    counts.set(key, (counts.get(key) ?? 0) + 1);
    if (!values.has(key)) values.set(key, value);
  }
  const problems = [];
  for (const [key, n] of counts) {
    if (n > 1) problems.push({ name: key, message: `given ${n} times; the first, ${quote(values.get(key))}, is used` });
  }
  return { values, problems };
}

// The query string for inputs calc answered: every value that is not the form's default.
export function linkQuery(given, defaults) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(given)) {
    if (!Object.hasOwn(defaults, key) || value !== defaults[key]) params.set(key, value);
  }
  return params.toString();
}
