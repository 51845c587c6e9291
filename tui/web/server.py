"""The console served to a browser: textual-serve's page and websocket, behind a key.

textual-serve starts one console process per websocket (a browser tab) and relays its screen
and keys; it has no authentication of its own. Here every request (the page, its statics, the
websocket) must carry the key as HTTP Basic credentials (the key the password, any user name);
anything else is answered 401 before textual-serve sees it, and a browser without the key asks
for it in its own prompt. The printed URL holds the key as its credentials
(`http://specdeck:KEY@127.0.0.1:8080/`) because that is the one place of a URL a browser keeps
out of its history and its HTTP cache (a `?key=` query or a `#key` fragment is stored in the
history even when it answers a redirect); the browser then keeps the credentials in memory for
this origin (scheme, host and port) only. No cookie: a browser sends the cookies of 127.0.0.1 to
every port of 127.0.0.1, whoever listens there. Every answer is `no-store`; a websocket from
another origin is refused.

Apart from the key, four things differ from textual-serve's own server:
- each tab's console is started from an argv list (textual-serve runs a shell string), and ends
  with its websocket however the websocket goes (a tab closed, a browser killed, a network gone
  silent past the heartbeat, the server's own end): asked to quit, then terminated, then killed;
  a console whose server is gone (its stdin closed) quits by itself (tui/web/driver.py);
- the address is printed only once it is bound: a port someone else holds gets no URL;
- the page loads nothing from elsewhere (textual-serve's asks a public CDN for its font: the
  font it bundles is served instead), and its terminal keeps an accessibility tree, so the
  console's rows are text a screen reader (or a test) can read; its font size is the page's
  choice for the window's width (16 px, smaller only to keep 60 columns: a phone's text stays
  readable) unless `?fontsize=` gives one;
- an alert the terminal console would turn into a desktop notification reaches the page as
  a message of its own (`["notify", {...}]` on the websocket), which the page shows through the
  browser's Notification API, or in its title when notifications are refused.

No log line of ours holds the key: aiohttp's access log is off, and textual-serve's logging
goes to our log file, never to the terminal.
"""

import asyncio
import base64
import binascii
import hmac
import json
import logging
import os
import secrets
import signal
import urllib.parse
from pathlib import Path

import aiohttp_jinja2
import textual_serve
from aiohttp import WSCloseCode, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from .. import logs

logs.installed()  # aiohttp and textual-serve log through logging itself: set up before they log
log = logging.getLogger("specdeck.web")

# The cookie that held the key itself before: expired wherever a browser still sends it.
OLD_COOKIE = "specdeck_web"
USER = "specdeck"
REALM = 'Basic realm="specdeck web", charset="UTF-8"'
HERE = Path(__file__).resolve().parent
SERVE_STATIC = Path(textual_serve.__file__).resolve().parent / "static"
# textual-serve's terminal, with xterm's accessibility tree on (its rows as DOM text).
TERMINAL_ANCHOR = "new v.Terminal({allowProposedApi:!0,"
TOKEN_MIN = 16
DRIVER = "tui.web.driver:ConsoleDriver"
SIGNIN_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>specdeck</title>
<script>window.location.replace(window.location.origin + "/" + window.location.search);</script>
</head><body></body></html>
"""
# A websocket whose browser went silent (a laptop asleep, a tunnel cut) is closed after about
# one and a half of these: its console ends then.
HEARTBEAT_S = 5
# How long a console has to quit when asked, then to end when terminated, before it is killed.
QUIT_GRACE_S = 3
TERM_GRACE_S = 2


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


def basic_password(header):
    """The password of an `Authorization: Basic` header, or None."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        credentials = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return credentials.partition(":")[2]


def terminal_script():
    """textual-serve's textual.js, its terminal keeping an accessibility tree."""
    text = (SERVE_STATIC / "js" / "textual.js").read_text(encoding="utf-8")
    if TERMINAL_ANCHOR not in text:
        log.warning("textual-serve's terminal script has changed: its rows are not kept as text")
        return text
    return text.replace(TERMINAL_ANCHOR, TERMINAL_ANCHOR + "screenReaderMode:!0,", 1)


class ConsoleService(AppService):
    """One tab's console process, started from an argv list; its alerts go to the page; ended
    for good by `end`."""

    def __init__(self, argv, **kwargs):
        super().__init__(" ".join(argv), **kwargs)
        self.argv = list(argv)
        self._ending = None

    def _build_environment(self, width=80, height=24):
        environment = super()._build_environment(width=width, height=height)
        environment["TEXTUAL_DRIVER"] = DRIVER  # textual's web driver, quitting when its server goes
        return environment

    async def _open_app_process(self, width=80, height=24):
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._build_environment(width=width, height=height))
        self._stdin = process.stdin
        return process

    async def send_meta(self, data):
        try:
            return await super().send_meta(data)
        except (OSError, RuntimeError):  # a console already gone: nothing to tell it
            return False

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

    async def stop(self):
        await self.end()

    async def end(self):
        """Asked to quit; terminated if it has not after QUIT_GRACE_S, killed after TERM_GRACE_S
        more. Once, whoever asks (the tab's handler, the server's end), and whole even when the
        asker is cancelled."""
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())
        await asyncio.shield(self._ending)

    async def _end(self):
        process = self._process
        if process is None:
            return
        try:
            await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        except Exception:
            log.exception("a tab's downloads")
        if process.returncode is None:
            await self.send_meta({"type": "quit"})
            for stop, grace_s in ((None, QUIT_GRACE_S), (process.terminate, TERM_GRACE_S), (process.kill, None)):
                if stop is not None:
                    try:
                        stop()
                    except ProcessLookupError:
                        pass
                try:
                    await asyncio.wait_for(process.wait(), grace_s)
                    break
                except asyncio.TimeoutError:
                    log.warning("a tab's console (pid %d) did not end in %d s: %s", process.pid, grace_s,
                                "terminated" if stop is None else "killed")
        if self._task is not None:
            # Its output read to the end; a pipe some child of it still holds is let go.
            try:
                await asyncio.wait_for(self._task, TERM_GRACE_S)
            except asyncio.TimeoutError:
                pass
            except Exception:
                log.exception("a tab's console output")
            self._task = None


class WebConsole(Server):
    """textual-serve's server for `argv` (the console's command line), behind `token`."""

    def __init__(self, argv, token, host="127.0.0.1", port=8080, title="specdeck"):
        super().__init__(" ".join(argv), host=host, port=port, title=title, statics_path=str(SERVE_STATIC),
                         templates_path=str(HERE / "templates"))
        self.argv = list(argv)
        self.token = token
        self.script = terminal_script()
        self.sockets = set()  # every tab's open websocket
        self.consoles = set()  # every tab's console not yet ended

    def url(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%s@%s:%d/signin" % (USER, urllib.parse.quote(self.token, safe=""), host, self.port)

    def initialize_logging(self):
        pass  # ours: setup_logging put everything in the log file

    async def on_startup(self, app):
        pass  # the command prints the URL once bound; textual-serve's banner would print the server's

    def _allowed(self, request):
        offered = basic_password(request.headers.get("Authorization"))
        return offered is not None and hmac.compare_digest(offered.encode(), self.token.encode())

    @web.middleware
    async def guard(self, request, handler):
        if not self._allowed(request):
            return web.Response(status=401, text="401: this console needs the URL it printed, with its key\n",
                                headers={"WWW-Authenticate": REALM, "Cache-Control": "no-store",
                                         "Referrer-Policy": "no-referrer"})
        if request.path == "/ws" and not self._same_origin(request):
            return web.Response(status=403, text="403: a websocket from another origin\n")
        response = await handler(request)
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        if OLD_COOKIE in request.cookies and not response.prepared:
            response.del_cookie(OLD_COOKIE)
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
        app.router.add_get("/signin", self.handle_signin)
        return app

    async def handle_signin(self, request):
        # The printed URL's page: the browser now holds the key for this origin; its tab's
        # address (which keeps the credentials it was opened with, out of the page's reach)
        # is replaced by the console's, so that a copy of it or a bookmark holds no key. The
        # page's own origin, not ours: the scheme a TLS proxy gave it stays.
        return web.Response(content_type="text/html", text=SIGNIN_PAGE)

    async def handle_script(self, request):
        return web.Response(text=self.script, content_type="application/javascript")

    async def handle_index(self, request):
        # Every URL in the page is relative to it (the websocket's too, made by the page), so
        # the page works through a tunnel or a TLS proxy as well as here.
        context = {"title": self.title, "font_size": _size(request.query.get("fontsize"), 0, low=6, high=32)}
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request):
        websocket = web.WebSocketResponse(heartbeat=HEARTBEAT_S, max_msg_size=1 << 20)
        width = _size(request.query.get("width"), 80)
        height = _size(request.query.get("height"), 24)
        service = None
        self.sockets.add(websocket)
        try:
            await websocket.prepare(request)
            service = ConsoleService(self.argv, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                                     close=websocket.close, download_manager=self.download_manager)
            self.consoles.add(service)
            await service.start(width, height)
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("a tab's console")
        finally:
            # However the websocket went (closed, reset, silent past the heartbeat, the server
            # ending), its console goes with it.
            self.sockets.discard(websocket)
            if service is not None:
                await service.end()
                self.consoles.discard(service)
            if websocket.prepared:
                await websocket.close()
        return websocket

    def serve(self, on_listening=lambda: None, debug=False):
        """Bind, call `on_listening()`, and serve until SIGINT or SIGTERM; then end every tab's
        console before returning. OSError when the address cannot be bound (nothing called)."""
        asyncio.run(self._serve(on_listening))

    async def _serve(self, on_listening):
        # No access log: it would print every request's line.
        runner = web.AppRunner(await self._make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
            ended = asyncio.Event()
            loop = asyncio.get_running_loop()
            for number in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(number, ended.set)
            on_listening()
            await ended.wait()
        finally:
            await self.end_consoles()
            await runner.cleanup()

    async def end_consoles(self):
        """Every tab's websocket closed and its console ended."""
        for websocket in list(self.sockets):
            await websocket.close(code=WSCloseCode.GOING_AWAY, message=b"the server ends")
        await asyncio.gather(*(service.end() for service in list(self.consoles)), return_exceptions=True)


def _size(text, default, low=10, high=1000):
    try:
        return max(low, min(int(text), high))
    except (TypeError, ValueError):
        return default
