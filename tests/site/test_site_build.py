"""The site's build, without a browser: placeholders, offline assets, anchors (the wheel: test_site_startup.py)."""

from __future__ import annotations

import json
import re

import pytest
from mkdocs.exceptions import PluginError
from site_fixtures import answer_for, built_site

import calc
from hooks import deck, placeholders, search, wheel

DEFAULT = answer_for({})


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("calc:llama-7b step.bytes.weights", f"{calc.format_gb(DEFAULT['step']['bytes']['weights'])} GB"),
        ("calc:llama-7b step.params int", f"{DEFAULT['step']['params']:,}"),
        ("calc:llama-7b table.mixed-full.peak GB", f"{DEFAULT['table'][2]['display']['peak']['gb']} GB"),
        ("calc:decoder seq=8 micro-batch=16 step.peak int",
         f"{calc.step(calc.PRESETS['decoder'], 8, 16)['peak']:,}"),
        ("calc:decoder seq=8 micro-batch=1 layer_bytes values",
         f"{calc.layer_bytes(calc.PRESETS['decoder'], 8, 1) // 2:,}"),
        ("calc:llama-7b recipes.mixed.per_param int", "16"),
        ("calc:llama-7b step.bytes.weights+step.bytes.gradients int",
         f"{DEFAULT['step']['bytes']['weights'] + DEFAULT['step']['bytes']['gradients']:,}"),
    ],
)
def test_placeholders_print_calcs_values(spec, text):
    """Each placeholder prints the value calc computes, in the format asked for."""
    assert placeholders.resolve(spec) == text


@pytest.mark.parametrize(
    "spec",
    ["calc:llama-7b step.bytes.weigths", "calc:llama-8b step.peak", "calc:llama-7b step.peak KiB",
     "calc:llama-7b seq=abc step.peak", "calc:llama-7b table.mixed-partial.peak", "calc:llama-7b"],
)
def test_a_bad_placeholder_fails_the_build(spec):
    """A typo in a placeholder raises a build error naming the page and the placeholder."""

    class Page:
        class file:
            src_uri = "index.md"

    with pytest.raises(PluginError, match=r"index\.md: bad placeholder"):
        placeholders.on_page_markdown(f"text {{{{ {spec} }}}}", Page, None, None)


def test_a_misspelt_placeholder_prefix_fails_the_build():
    """'{{ clac:... }}' is not left on the page: the build names it."""

    class Page:
        class file:
            src_uri = "index.md"

    with pytest.raises(PluginError, match=r"index\.md: unknown placeholder '\{\{ clac:llama-7b step.peak \}\}'"):
        placeholders.on_page_markdown("text {{ clac:llama-7b step.peak }}", Page, None, None)


def test_the_page_has_no_placeholder_left_and_the_table_matches_calc():
    """The built page holds calc's bytes in every cell and no unexpanded {{ ... }}."""
    html = (built_site() / "index.html").read_text()
    assert "{{" not in html
    for row in DEFAULT["table"]:
        for part, value in [*row["bytes"].items(), ("peak", row["peak"])]:
            cell = re.search(rf'<tr data-recipe="{row["id"]}">.*?data-part="{part}" data-bytes="(\d+)"', html, re.S)
            assert cell and int(cell[1]) == value


def test_the_built_site_carries_its_runtime_and_names_no_other_host():
    """Pyodide, KaTeX, the wheel and the figures are in the site; no page or style loads from another host."""
    site = built_site()
    for path in ["assets/pyodide/pyodide.mjs", "assets/pyodide/pyodide.asm.wasm", "assets/pyodide/python_stdlib.zip",
                 "assets/wheels/pyodide-lock.json", "assets/katex/katex.min.css", f"assets/wheels/{wheel.filename()}",
                 "figures/memory-breakdown.svg", "figures/peak-vs-seq.svg", "figures/step-walk.svg",
                 "javascripts/calculator.js", "javascripts/calc-worker.mjs"]:
        assert (site / path).is_file(), path
    # What a browser fetches by itself: src=, <link href=>, CSS url() and @import (plain <a href> is only a link).
    external = re.compile(r"""src=["']?(?:https?:)?//|<link[^>]+href=["']?(?:https?:)?//|url\(["']?(?:https?:)?//"""
                          r"""|@import\s+["']?(?:https?:)?//""")
    for page in [*site.rglob("*.html"), *site.rglob("*.css")]:
        assert not external.search(page.read_text(errors="replace")), page


def test_results_sections_have_stable_anchors():
    """Numbered headings of results.md get #sec-N-M anchors that can be cited."""
    html = (built_site() / "results" / "index.html").read_text()
    for anchor in ["sec-10", "sec-10-1", "sec-10-4", "sec-10-6"]:
        assert f'id="{anchor}"' in html


@pytest.mark.parametrize("name", ["peak-vs-seq.svg", "peak-vs-seq-narrow.svg", "memory-breakdown.svg", "step-walk.svg"])
def test_static_figures_have_a_readable_number_of_ticks(name):
    """A tick label every round step, not one per sweep point (the sweep has 200 of them)."""
    svg = (built_site() / "figures" / name).read_text()
    assert 3 <= len(re.findall(r'<g id="xtick_\d+">', svg)) <= 10


def test_every_static_figure_has_a_phone_width_variant_that_pages_offer():
    """Each figure has a -narrow.svg drawn about 400 px wide, and every page offers it in a <picture>."""
    site = built_site()
    for name in ("memory-breakdown", "peak-vs-seq", "step-walk"):
        narrow = (site / "figures" / f"{name}-narrow.svg").read_text()
        width_pt = float(re.search(r'<svg[^>]* width="([\d.]+)pt"', narrow)[1])
        assert width_pt * 4 / 3 <= 420  # in CSS px: fits a phone's column at about its own size
        for page in ("results/index.html", "index.html"):
            html = (site / page).read_text()
            assert re.search(rf'<picture><source media="[^"]+" srcset="[^"]*figures/{name}-narrow\.svg">', html)


def test_static_and_live_charts_share_their_colours():
    """The build-time figures colour each category and each recipe's line as the live charts do (site.css's
    light scheme), and the static sweep draws those colours."""
    from hooks import figures

    css = (built_site() / "stylesheets" / "site.css").read_text()
    light = dict(re.findall(r"--calc-([a-z0-9-]+): (#[0-9a-f]{6});", css.split("[data-md-color-scheme")[0]))
    assert {c: light[c] for c in calc.CATEGORIES} == {c: v.lower() for c, v in figures.COLOURS.items()}
    rows = [f"{recipe}-{recompute}" for recipe, recompute in calc.TABLE_ROWS]
    lines = [light[f"line-{i + 1}"] for i in range(len(rows))]  # calculator.js: the sweep's i-th row, calc-line-(i+1)
    assert [figures.RECIPE_STYLES[r][0].lower() for r in rows] == lines
    svg = (built_site() / "figures" / "peak-vs-seq.svg").read_text().lower()
    assert all(f"stroke: {colour}" in svg for colour in lines)


def test_flags_in_inline_code_are_kept_whole_and_code_blocks_untouched():
    """hooks/flags.py wraps each --flag of inline code (so no line breaks after its dashes), leaves its text as it
    was (what a reader copies runs) and does not touch highlighted code blocks."""
    from hooks.flags import wrap_flags

    assert wrap_flags("<p><code>python -m calc --walk eager --seq 8</code> and <code>a--b</code></p>") == (
        '<p><code>python -m calc <span class="calc-flag">--walk</span> eager <span class="calc-flag">--seq</span> 8'
        "</code> and <code>a--b</code></p>"
    )
    block = '<pre><span></span><code><span class="o">--</span>walk</code></pre>'
    assert wrap_flags(block) == block
    for page in ("index.html", "results/index.html", "finetune/index.html"):
        html = (built_site() / page).read_text()
        assert '<span class="calc-flag">--' in html
        assert not re.search(r"<code>[^<]*(?<![\w-])--[A-Za-z]", html), page  # no bare flag left in inline code


def test_the_capacity_buttons_are_calcs_cards():
    """One capacity button per card size calc knows (--card), 24 GB consumer cards included, each naming its cards."""
    html = (built_site() / "index.html").read_text()
    buttons = re.findall(r'data-capacity-preset="([\d.]+)" title="([^"]*)"', html)
    sizes = sorted(set(calc.inputs.CARDS.values()), key=float)
    assert [gb for gb, _ in buttons] == sizes and "24" in sizes
    for gb, names in buttons:
        assert names.split(", ") == [card for card, size in calc.inputs.CARDS.items() if size == gb]


def test_the_eager_band_says_which_device_its_steps_ran_on():
    """Issue 20's "also": the eager figure is for a GPU, and its error band says it was measured on CPU steps
    only while every measured run in docs/data is a CPU run (the words follow the data, not the page)."""
    import json

    devices = set()
    for path in deck.MEASURED.values():
        devices |= {r["device"] for r in json.loads(path.read_text())["runs"] if r.get("measured_peak")}
    bands = placeholders.bands_with_devices(deck.eager_bands())
    every = [band for kind in bands.values() for band in kind]
    assert every and all("measured on" in band["setting"] for band in every)
    page = (built_site() / "index.html").read_text()
    if devices == {"cpu"}:
        assert all(band["setting"].endswith("measured on a CPU only: no GPU run yet") for band in every)
        assert "measured on a CPU only: no GPU run yet" in page  # in the bands the page carries for the widget
    assert placeholders.measured_on("10.8") in page
    # the default step (mixed precision, CUDA's AdamW) is one no measured step ran: the page quotes no band for it
    assert "No measured step ran this recipe, optimizer and loop" in page


def test_the_eager_line_says_its_attention_differs_from_the_deck_peaks():
    """The default step: the deck's peak keeps the s x s scores (eager attention's), the eager walk beside it
    runs sdpa (calc.inputs.attention_fields): the built line says so, not "the same step" (view.js's
    eagerLead says the same once the worker answers: tests/js/view.test.mjs)."""
    assert (DEFAULT["step"]["config"]["attention"], DEFAULT["eager"]["attention"]) == ("eager", "sdpa")
    line = re.search(r"<p class=\"calc-eager\"[^>]*>(.*?)</p>", (built_site() / "index.html").read_text(), re.S)[1]
    assert line.startswith("What PyTorch allocates for this step with sdpa attention, where the peak above keeps "
                           "eager attention's s x s scores (<code>")
    assert "same step" not in line


def test_the_built_planner_status_counts_its_rows_as_the_live_one_does():
    """Without JavaScript (or before the runtime starts) the planner's status is the built page's: a list that
    stops at the planner's limit says "the first N layouts", as planner.js's countedLayouts does."""
    html = (built_site() / "index.html").read_text()
    status = re.search(r"data-plan-status[^>]*>(.*?)</p>", html, re.S)[1]
    rows = html.count("data-plan-row")
    assert rows == deck.PLAN_LIMIT
    assert status == f"The first {rows} layouts that fit (computed when this site was built)."


def test_tables_of_data_are_left_out_of_the_search_index_and_the_page_is_as_before():
    """hooks/search.py: a table of more than SEARCHED_ROWS body rows is marked for Material's search to skip, a
    smaller one and the prose are not; in the built site the results page's measurement rows are not in the index,
    its prose is, and the mark (which the search plugin strips) is nowhere in the page."""
    def table(rows: int) -> str:
        return "<table><thead><tr><th>a</th></tr></thead><tbody>" + "<tr><td>1</td></tr>" * rows + "</tbody></table>"

    assert search.unsearched(table(search.SEARCHED_ROWS)) == table(search.SEARCHED_ROWS)
    assert search.unsearched(table(search.SEARCHED_ROWS + 1)).startswith('<table data-search-exclude="table">')
    site = built_site()
    index = json.loads((site / "search" / "search_index.json").read_text())
    results = " ".join(d["text"] for d in index["docs"] if d["location"].startswith("results/"))
    assert "7,268,768" not in results and "converts it by model type" in results  # a row of §12.4, its prose
    assert "data-search-exclude" not in (site / "results" / "index.html").read_text()

