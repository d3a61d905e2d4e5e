"""Serve the built site on 127.0.0.1 and drive Debian's Chromium with Playwright.

Shared by the browser tests (tests/site/test_site_*.py) and the benchmark (scripts/bench_site.py).
Chromium is the system one (/usr/bin/chromium, `apt-get install chromium`): Playwright never
downloads a browser here.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import io
import os
import threading
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-dev-shm-usage",  # containers often give /dev/shm only 64 MB
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MIME_TYPES = {  # what a module worker and streaming WebAssembly compilation insist on
    ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
    ".json": "application/json", ".svg": "image/svg+xml", ".woff2": "font/woff2", ".whl": "application/zip",
}


# Sent compressed, as a static host would: a file's prebuilt `.br` sibling where the client takes Brotli,
# else its `.gz` sibling (hooks/assets.py writes both for the runtime), else gzipped here; a .zip, .whl,
# image or font goes as it is.
COMPRESSED_TYPES = ("text/", "application/javascript", "application/json", "image/svg+xml", "application/wasm")
ENCODINGS = ("br", "gzip")  # what the server offers, best first; serve(encodings=("gzip",)) is a gzip-only host
SIBLINGS = {"br": ".br", "gzip": ".gz"}
# The longest request line read (http.server's own limit is 64 KB, answered "414 Request-URI Too Long"): past
# Chromium's longest address (url::kMaxURLChars, 2 MiB), so that a link of any length the browser sends
# reaches the page, which refuses a config that is too long or too deep itself (link.js).
MAX_REQUEST_LINE = 4 << 20


def accepted(header: str) -> set[str]:
    """The codings an Accept-Encoding header takes ("gzip, deflate, br, zstd"), less any with q=0."""
    codings = set()
    for part in header.split(","):
        name, _, params = part.strip().partition(";")
        if name and params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000"):
            codings.add(name.strip().lower())
    return codings


class _Handler(http.server.SimpleHTTPRequestHandler):
    """As a static host serves a site: under `prefix` (a project page such as /course/memory/), and a
    missing path answered with the site's 404.html and status 404."""

    extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME_TYPES}
    prefix = "/"
    encodings = ENCODINGS

    def _encoded(self, path: str, ctype: str) -> tuple[str, bytes] | None:
        """(coding, body) for the file as this host sends it to this client, or None to send it as it is."""
        takes = accepted(self.headers.get("Accept-Encoding", ""))
        for coding in self.encodings:
            if coding in takes and os.path.isfile(path + SIBLINGS[coding]):
                with open(path + SIBLINGS[coding], "rb") as f:
                    return coding, f.read()
        if "gzip" in self.encodings and "gzip" in takes and ctype.startswith(COMPRESSED_TYPES):
            with open(path, "rb") as f:
                return "gzip", gzip.compress(f.read(), compresslevel=6, mtime=0)
        return None

    def _send_compressed(self):
        """The file, compressed where the client takes it and a static host would compress it."""
        path = self.translate_path(self.path)
        if os.path.isdir(path) and self.path.split("?")[0].endswith("/"):
            path = os.path.join(path, "index.html")
        ctype = self.guess_type(path)
        encoded = self._encoded(path, ctype) if os.path.isfile(path) else None
        if encoded is None:
            return super().send_head()
        coding, body = encoded
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Encoding", coding)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Vary", "Accept-Encoding")
        self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
        self.end_headers()
        return io.BytesIO(body)

    def end_headers(self):
        # As GitHub Pages and most static hosts do: a page's second worker (the planner's) takes Pyodide
        # from the browser's cache instead of downloading it again.
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def handle_one_request(self):
        """http.server's, with a request line of up to MAX_REQUEST_LINE bytes (its own stops at 64 KB)."""
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():  # it has sent its error
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
                return
            method()
            self.wfile.flush()
        except TimeoutError as e:
            self.log_error("Request timed out: %r", e)
            self.close_connection = True

    def translate_path(self, path: str) -> str:
        clean = path.split("?", 1)[0].split("#", 1)[0]
        if not clean.startswith(self.prefix):
            return str(Path(self.directory) / ".outside-the-site")  # nothing there: a plain 404
        return super().translate_path("/" + path[len(self.prefix):])

    def send_head(self):
        path = Path(self.translate_path(self.path))
        missing = not (path.is_file() or (path.is_dir() and (path / "index.html").is_file()))
        page = Path(self.directory) / "404.html"
        if missing and page.is_file() and self.path.startswith(self.prefix):
            body = page.read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return io.BytesIO(body)
        return self._send_compressed()


@contextlib.contextmanager
def serve(directory: Path = SITE, port: int = 0, prefix: str = "/",
          encodings: tuple[str, ...] = ENCODINGS) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (a free port unless given) under the path `prefix` (e.g.
    "/course/memory/", as a project page of a static host), sending the codings in `encodings` the
    client takes (best first; () sends every file as it is); yields the site's URL."""
    if not (directory / "index.html").exists():
        raise FileNotFoundError(f"{directory} has no index.html: build the site first (make build)")
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    settings = {"prefix": prefix, "encodings": tuple(encodings)}
    handler = functools.partial(type("Handler", (_Handler,), settings), directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    finally:
        server.shutdown()
        server.server_close()


def launch(playwright, **options):
    """Headless Debian Chromium."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} not found: apt-get install chromium (make setup does)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, **options)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Serve the built site on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--directory", type=Path, default=SITE)
    parser.add_argument("--prefix", default="/", help="serve under this path, e.g. /course/memory/ (a project page)")
    parser.add_argument("--encodings", default=",".join(ENCODINGS),
                        help="codings to send, best first: br,gzip (default), gzip, or none")
    args = parser.parse_args()
    encodings = tuple(c for c in args.encodings.split(",") if c in SIBLINGS)
    with serve(args.directory, args.port, args.prefix, encodings) as url:
        print(f"Serving {args.directory} at {url} (Ctrl-C stops)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
