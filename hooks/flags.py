"""MkDocs hook: a command-line flag in running text never breaks after its "--".

Browsers may break a line after a hyphen, so ``--walk eager`` can end one line with "--" and start the
next with "walk". Each ``--flag`` inside inline code is wrapped in ``<span class="calc-flag">`` (site.css:
no break inside); the text is unchanged, so what a reader copies still runs. Code blocks (highlighted:
their ``<code>`` holds markup) are left alone.
"""

from __future__ import annotations

import re

INLINE_CODE = re.compile(r"<code>([^<]*)</code>")
FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")


def wrap_flags(html: str) -> str:
    return INLINE_CODE.sub(lambda m: "<code>" + FLAG.sub(r'<span class="calc-flag">\1</span>', m[1]) + "</code>", html)


def on_post_page(output: str, page, config) -> str:
    return wrap_flags(output)
