// A pasted or dropped config.json, checked in the page before anything reaches the worker (pure;
// tests/js/config-paste.test.mjs): a size limit, a nesting limit read without recursion, then JSON.parse.

// A transformers config.json nests a few levels (rope_scaling, quantization_config, text_config); far deeper
// is not a config, and deep nesting is what overflows Python's stack inside Pyodide (issue 20, item 2).
export const MAX_DEPTH = 32;

// How deeply the text's arrays and objects nest, outside strings, in one pass (no recursion to overflow).
export function nestingDepth(text) {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "[" || c === "{") deepest = Math.max(deepest, ++depth);
    else if (c === "]" || c === "}") depth--;
  }
  return deepest;
}

// null when the text may go to calc, else why not (one line, for the config box). `maxChars`: calc.hf.MAX_CHARS.
export function configProblem(text, maxChars) {
  if (text.length > maxChars) {
    return `${text.length.toLocaleString("en-US")} characters is not a config.json (a few kB); at most ` +
      `${maxChars.toLocaleString("en-US")} characters are read`;
  }
  const depth = nestingDepth(text);
  if (depth > MAX_DEPTH) return `not a config.json: nested ${depth.toLocaleString("en-US")} levels deep, where at most ${MAX_DEPTH} are read`;
  let parsed;
  try {
    // a leading UTF-8 byte-order mark (Windows editors write one) is not JSON's; calc.hf.parse drops it too
    parsed = JSON.parse(text.replace(/^\ufeff/, ""));
  } catch (error) {
    return `not JSON: ${error.message}`;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    return "not a config.json: it must be one JSON object ({...})";
  }
  return null;
}
