"""MkDocs hook: an accessible name for Material's search dialog.

Material renders its search as ``role="dialog"`` without a name (axe: aria-dialog-name); the
fix is one attribute, added to the built HTML rather than by copying the theme's template.
"""

SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'


def on_post_page(output: str, page, config) -> str:
    return output.replace(SEARCH_DIALOG, SEARCH_DIALOG[:-1] + ' aria-label="Search">', 1)


def on_post_template(output: str, template_name: str, config) -> str:
    """The 404 page is a template, not a page: its search dialog gets the same name."""
    if template_name != "404.html":
        return output
    return output.replace(SEARCH_DIALOG, SEARCH_DIALOG[:-1] + ' aria-label="Search">', 1)
