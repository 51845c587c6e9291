"""Alerts on the laptop's desktop while the console is open: the escape sequence the terminal
turns into a desktop notification, written through the app's driver (so it goes out between
Textual's frames, never inside one).

Which sequence, by terminal (TERM_PROGRAM, TERM and a few variables terminals set):
- OSC 777 `ESC ] 777 ; notify ; TITLE ; BODY BEL`: foot, urxvt (rxvt-unicode), WezTerm, Ghostty;
- OSC 9 `ESC ] 9 ; specdeck: TITLE: BODY BEL`: iTerm2, Windows Terminal, kitty;
- the bell (BEL) for every other terminal, tmux and screen included (they pass a bell on, not
  these sequences): the one default.
SPECDECK_DESKTOP_NOTIFY=osc777|osc9|bell|off chooses instead.
"""

import os

from textual.message import Message

from ..display import cut, safe_text

TITLE_MAX = 80
BODY_MAX = 240


class HostAlerts(Message):
    """Alerts a host raised (notify.follow), for the app to put on the desktop; `host` as typed.
    `recent`: the newest it raised before the console followed (notify.list), for the views
    to show (a server's below_break_even), not to ring again."""

    def __init__(self, alerts, host="", recent=False):
        super().__init__()
        self.alerts = alerts
        self.host = host
        self.recent = recent


def kind_for(env=None):
    """osc777, osc9, bell or off for the terminal `env` describes (default: this process's)."""
    env = os.environ if env is None else env
    chosen = (env.get("SPECDECK_DESKTOP_NOTIFY") or "").strip().lower()
    if chosen in ("osc777", "osc9", "bell", "off"):
        return chosen
    program = (env.get("TERM_PROGRAM") or "").lower()
    term = (env.get("TERM") or "").lower()
    if program in ("tmux", "screen") or term.startswith(("screen", "tmux")):
        return "bell"
    if program in ("iterm.app", "kitty") or env.get("WT_SESSION") or env.get("KITTY_WINDOW_ID") or term == "xterm-kitty":
        return "osc9"
    if program in ("wezterm", "ghostty") or term.startswith(("foot", "rxvt-unicode", "xterm-ghostty", "wezterm")):
        return "osc777"
    return "bell"


def _clean(text, limit, separator=False):
    """One line whose controls show as escapes (an ESC or BEL in a job name would end the
    sequence early and spill the rest onto the screen), and no `;` where OSC 777 splits its fields."""
    text = safe_text(" ".join((text or "").split()))
    if separator:
        text = text.replace(";", ",")
    return cut(text, limit)


def sequence(title, body, kind):
    """What to write for one notification ("" for off)."""
    if kind == "off":
        return ""
    if kind == "osc777":
        return "\x1b]777;notify;%s;%s\x07" % (_clean(title, TITLE_MAX, True), _clean(body, BODY_MAX, True))
    if kind == "osc9":
        # Led by a word: ConEmu reads `9;<digit>;` as a command of its own, not a message.
        return "\x1b]9;%s\x07" % _clean("specdeck: %s: %s" % (title, body), TITLE_MAX + BODY_MAX)
    return "\x07"


def alerts_notification(alerts, host):
    """(title, body) of one desktop notification for alerts that came together."""
    if len(alerts) == 1:
        return alerts[0].get("title") or "specdeck", alerts[0].get("message") or ""
    return "%d alerts on %s" % (len(alerts), host), "; ".join(a.get("message") or "" for a in alerts[:4]) + (
        " ..." if len(alerts) > 4 else "")
