"""MkDocs hook: typeset math at build time with KaTeX from node_modules.

pymdownx.arithmatex (generic mode) leaves ``\\(...\\)`` and ``\\[...\\]`` in
spans and divs; each page's formulas go to one ``node`` call and come back as
KaTeX HTML (with MathML for screen readers). The page then needs only KaTeX's
CSS and fonts, which hooks/assets.py serves from the site: no script, no CDN,
and the formulas read with JavaScript off. A formula KaTeX rejects fails the build.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
KATEX = ROOT / "node_modules" / "katex"

MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">(?P<body>.*?)</(?P=tag)>', re.DOTALL
)

RENDER_JS = """
const katex = require(process.argv[1]);
const items = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = items.map(([tex, display]) =>
  katex.renderToString(tex, {displayMode: display, throwOnError: true, output: "htmlAndMathml"}));
process.stdout.write(JSON.stringify(out));
"""


def _strip_delimiters(body: str, display: bool) -> str:
    tex = html.unescape(body).strip()
    opening, closing = (r"\[", r"\]") if display else (r"\(", r"\)")
    if not (tex.startswith(opening) and tex.endswith(closing)):
        raise PluginError(f"unexpected arithmatex output: {body[:60]!r}")
    return tex[len(opening):-len(closing)].strip()


def render(formulas: list[tuple[str, bool]]) -> list[str]:
    """KaTeX HTML for each (tex, display) pair, in one node process."""
    node = shutil.which("node")
    if node is None or not KATEX.is_dir():
        raise PluginError("KaTeX needs node and node_modules/katex: run `make setup` (npm ci)")
    result = subprocess.run(
        [node, "-e", RENDER_JS, str(KATEX)],
        input=json.dumps(formulas), capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise PluginError(f"KaTeX failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def on_page_content(html_text: str, page, config, files) -> str:
    matches = list(MATH.finditer(html_text))
    if not matches:
        return html_text
    formulas = [(_strip_delimiters(m["body"], m["tag"] == "div"), m["tag"] == "div") for m in matches]
    try:
        rendered = iter(render(formulas))
    except PluginError as error:
        raise PluginError(f"{page.file.src_uri}: {error}") from None
    page.meta["math"] = True  # site_overrides/main.html adds KaTeX's stylesheet
    return MATH.sub(lambda m: f'<{m["tag"]} class="math">{next(rendered)}</{m["tag"]}>', html_text)
