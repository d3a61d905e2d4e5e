"""MkDocs hook: tables of measurements left out of the site's search index.

Every reader's page downloads the search index (search/search_index.json); the rows of numbers of results.md's
measurement tables were a third of it (21 kB of 67 kB gzip) and no one searches for them, while the prose around
them stays searchable. A table of more than SEARCHED_ROWS rows gets Material's data-search-exclude, which its
search plugin reads as it indexes the page and then strips (plugins/search/plugin.py, on_page_context), so the
page's HTML is as before.
"""

from __future__ import annotations

import re

SEARCHED_ROWS = 12  # a table of more body rows is data
TABLE = re.compile(r"<table>(.*?)</table>", re.S)


def unsearched(html: str) -> str:
    """The page's HTML with each table of more than SEARCHED_ROWS body rows marked data-search-exclude."""

    def mark(m: re.Match) -> str:
        rows = m.group(1).count("<tr>") - 1  # the header's row
        return m.group(0) if rows <= SEARCHED_ROWS else f'<table data-search-exclude="table">{m.group(1)}</table>'

    return TABLE.sub(mark, html)


def on_page_content(html: str, page, config, files) -> str:
    return unsearched(html)
