"""MkDocs hook: a 404 page that works wherever the site is served.

A static host serves ``404.html`` for any missing path, at any depth, and often under a sub-path
(a project page such as ``/course/memory/``). MkDocs writes that page with links from the host's
root (``/assets/...``, ``/beyond/``) because it cannot know the sub-path; served there it would be
unstyled and its navigation would leave the site. Here its links become relative, and a small
script at the top of its head finds the site's root, the nearest folder above the address whose
``404.html`` is this page (status 200 and this page's marker), and sets ``<base href>`` to it before
anything else loads. Opened from disk it takes its own folder.

The page's stylesheets and scripts are written by small inline scripts rather than left as tags: the
browser's preload scanner reads ahead of the first script and would fetch every relative URL against
the missing path (``/nope/assets/...``: five 404s) before ``<base>`` exists.
"""

from __future__ import annotations

import json
import re

MARKER = '<meta name="calc-site-root" content="404">'
MAX_DEPTH = 16  # folders the 404 page probes upwards for the site's root; the root itself is the fallback
FIND_ROOT = """<script>
(function () {  // hooks/notfound.py: the site's root, for every relative link of this page
  var MAX_DEPTH = MAX_DEPTH_VALUE;
  // One leading slash: a path such as //other.host/x would make every relative URL below another host's.
  var root = location.pathname.replace(/^\\/+/, "/").replace(/[^/]*$/, "");
  if (location.protocol !== "file:") {
    // At most MAX_DEPTH folders up (a hostile address can be hundreds deep; each probe waits)
    for (var dir = root, tries = 0; ; dir = dir.replace(/[^/]*\\/$/, ""), tries++) {
      if (tries === MAX_DEPTH) { root = "/"; break; }
      try {
        var probe = new XMLHttpRequest();
        probe.open("GET", dir + "404.html", false);  // synchronous: the stylesheets below wait for it
        probe.send();
        var found = probe.status === 200 && probe.responseText.indexOf('<meta name="calc-site-root"') >= 0;
        if (found) { root = dir; break; }
      } catch (error) { /* try the folder above */ }
      if (dir === "/") { root = "/"; break; }
    }
  }
  window.__calcSiteRoot = root;
  document.write('<base href="' + encodeURI(root).replace(/"/g, "%22") + '">');
})();
</script>""".replace("MAX_DEPTH_VALUE", str(MAX_DEPTH))
# Material reads its base from this JSON: point it at the root found above.
SET_CONFIG_BASE = """<script>
(function () {
  var config = document.getElementById("__config"), data = JSON.parse(config.textContent);
  data.base = window.__calcSiteRoot || "/";
  config.textContent = JSON.stringify(data);
})();
</script>"""
ABSOLUTE = re.compile(r'((?:href|src)=")/(?!/)')
# What a preload scanner fetches ahead of the parser: stylesheets and scripts with a relative URL.
FETCHED = re.compile(
    r'<link rel="stylesheet" href="(?!https?:|//)[^"]+"[^>]*>|<script src="(?!https?:|//)[^"]+"[^>]*></script>'
)
CONFIG = re.compile(r'(<script id="__config" type="application/json">.*?</script>)', re.S)


def on_post_template(output: str, template_name: str, config) -> str:
    if template_name != "404.html":
        return output
    output = ABSOLUTE.sub(r"\1", output).replace('href="."', 'href="./"')
    output = output.replace('"search": "/assets/', '"search": "assets/')
    output = FETCHED.sub(_written_later, output)
    output = output.replace("<head>", f"<head>\n{MARKER}\n{FIND_ROOT}", 1)
    return CONFIG.sub(lambda m: m[1] + SET_CONFIG_BASE, output, count=1)


def _written_later(m: re.Match) -> str:
    """A tag written by the parser once <base> is set, where no preload scanner sees its URL."""
    text = json.dumps(m[0]).replace("</", "<\\/")  # no "</script>" inside the inline script
    return f"<script>document.write({text})</script>"
