"""MkDocs hooks that build the site from calc: placeholders, math, vendored assets."""
