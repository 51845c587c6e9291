"""The console served to a browser: textual-serve's page and websocket, behind a secret.

textual-serve starts one console process per websocket (a browser tab) and relays its screen
and keys; it has no authentication of its own. Here every request (the page, its statics, the
websocket) must carry the secret, as `?key=` in the URL the user is given or as the cookie the
page sets from it; anything else is answered 403 before textual-serve sees it. The cookie is
HttpOnly and SameSite=Strict, so another site's page cannot open the websocket with it; a
websocket from another origin is refused as well.

Apart from the secret, three things differ from textual-serve's own server:
- each tab's console is started from an argv list (textual-serve runs a shell string);
- the page loads nothing from elsewhere (textual-serve's asks a public CDN for its font: the
  font it bundles is served instead), and its terminal keeps an accessibility tree, so the
  console's rows are text a screen reader (or a test) can read; its font size is the page's
  choice for the window's width (16 px, smaller only to keep 60 columns: a phone's text stays
  readable) unless `?fontsize=` gives one;
- an alert the terminal console would turn into a desktop notification reaches the page as
  a message of its own (`["notify", {...}]` on the websocket), which the page shows through the
  browser's Notification API, or in its title when notifications are refused.

No log line of ours holds the secret: aiohttp's access log (which would print each request's
query) is off, and textual-serve's logging goes to our log file, never to the terminal.
"""

import asyncio
import hmac
import json
import logging
import os
import secrets
from pathlib import Path

import aiohttp_jinja2
import textual_serve
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from .. import logs

logs.installed()  # aiohttp and textual-serve log through logging itself: set up before they log
log = logging.getLogger("specdeck.web")

COOKIE = "specdeck_web"
HERE = Path(__file__).resolve().parent
SERVE_STATIC = Path(textual_serve.__file__).resolve().parent / "static"
# textual-serve's terminal, with xterm's accessibility tree on (its rows as DOM text).
TERMINAL_ANCHOR = "new v.Terminal({allowProposedApi:!0,"
TOKEN_MIN = 16


class TokenFileError(ValueError):
    pass


def read_token_file(path):
    """The secret in `path`: its first line, at least TOKEN_MIN characters, in a file only its
    owner may read (as ssh asks of a private key)."""
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="utf-8") as f:
            token = f.readline(4096).strip()
    except OSError as exc:
        raise TokenFileError("cannot read the token file %s: %s" % (path, exc.strerror or exc))
    if mode & 0o077:
        raise TokenFileError("the token file %s can be read by others (mode %o): chmod 600 it" % (path, mode & 0o777))
    if len(token) < TOKEN_MIN or any(c.isspace() or not c.isprintable() for c in token):
        raise TokenFileError("the token in %s must be one word of at least %d characters" % (path, TOKEN_MIN))
    return token


def new_token():
    return secrets.token_urlsafe(24)


def terminal_script():
    """textual-serve's textual.js, its terminal keeping an accessibility tree."""
    text = (SERVE_STATIC / "js" / "textual.js").read_text(encoding="utf-8")
    if TERMINAL_ANCHOR not in text:
        log.warning("textual-serve's terminal script has changed: its rows are not kept as text")
        return text
    return text.replace(TERMINAL_ANCHOR, TERMINAL_ANCHOR + "screenReaderMode:!0,", 1)


class ConsoleService(AppService):
    """One tab's console process, started from an argv list; its alerts go to the page."""

    def __init__(self, argv, **kwargs):
        super().__init__(" ".join(argv), **kwargs)
        self.argv = list(argv)

    async def _open_app_process(self, width=80, height=24):
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._build_environment(width=width, height=height))
        self._stdin = process.stdin
        return process

    async def on_meta(self, data):
        try:
            meta = json.loads(data)
        except ValueError:
            return
        if isinstance(meta, dict) and meta.get("type") == "notify":
            note = {key: str(meta.get(key) or "")[:400] for key in ("title", "body")}
            note["urgent"] = bool(meta.get("urgent"))
            await self.remote_write_str(json.dumps(["notify", note]))
            return
        await super().on_meta(data)


class WebConsole(Server):
    """textual-serve's server for `argv` (the console's command line), behind `token`."""

    def __init__(self, argv, token, host="127.0.0.1", port=8080, title="specdeck"):
        super().__init__(" ".join(argv), host=host, port=port, title=title, statics_path=str(SERVE_STATIC),
                         templates_path=str(HERE / "templates"))
        self.argv = list(argv)
        self.token = token
        self.script = terminal_script()

    def url(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%d/?key=%s" % (host, self.port, self.token)

    def initialize_logging(self):
        pass  # ours: setup_logging put everything in the log file

    async def on_startup(self, app):
        pass  # the command printed the URL; textual-serve's banner would print the server's

    def _allowed(self, request):
        offered = request.query.get("key") or request.cookies.get(COOKIE) or ""
        return hmac.compare_digest(offered.encode(), self.token.encode())

    @web.middleware
    async def guard(self, request, handler):
        if not self._allowed(request):
            return web.Response(status=403, text="403: this console needs the URL it printed, with its key\n")
        if request.path == "/ws" and not self._same_origin(request):
            return web.Response(status=403, text="403: a websocket from another origin\n")
        if request.query.get("key") and request.path != "/ws":
            # The key becomes the cookie and leaves the address bar (and the browser's history).
            query = {k: v for k, v in request.query.items() if k != "key"}
            response = web.HTTPFound(request.rel_url.with_query(query).path_qs if query else request.path)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
            return response
        response = await handler(request)
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        return response

    @staticmethod
    def _same_origin(request):
        origin = request.headers.get("Origin")
        if not origin:
            return True  # not a browser's page: it holds the secret all the same
        return origin.split("://", 1)[-1] == request.host

    async def _make_app(self):
        app = await super()._make_app()
        app.middlewares.insert(0, self.guard)
        app.router.add_get("/specdeck/textual.js", self.handle_script)
        return app

    async def handle_script(self, request):
        return web.Response(text=self.script, content_type="application/javascript")

    async def handle_index(self, request):
        # Every URL in the page is relative to it (the websocket's too, made by the page), so
        # the page works through a tunnel or a TLS proxy as well as here.
        context = {"title": self.title, "font_size": _size(request.query.get("fontsize"), 0, low=6, high=32)}
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request):
        websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=1 << 20)
        width = _size(request.query.get("width"), 80)
        height = _size(request.query.get("height"), 24)
        service = None
        try:
            await websocket.prepare(request)
            service = ConsoleService(self.argv, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                                     close=websocket.close, download_manager=self.download_manager)
            await service.start(width, height)
            try:
                await self._process_messages(websocket, service)
            finally:
                await service.stop()
        except asyncio.CancelledError:
            await websocket.close()
        except Exception:
            log.exception("a tab's console")
        finally:
            if service is not None:
                await service.stop()
        return websocket

    def serve(self, debug=False):
        """Until interrupted; no access log (it would print every request's query)."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        web.run_app(self._make_app(), host=self.host, port=self.port, access_log=None, loop=loop,
                    print=lambda *args: None)


def _size(text, default, low=10, high=1000):
    try:
        return max(low, min(int(text), high))
    except (TypeError, ValueError):
        return default
