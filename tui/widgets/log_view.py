"""The log view of a job (follow, search), and the feed that turns a job's log text into the
lines it shows.

The view only appends whole lines that the feed prepared on another thread, so a job that
prints megabytes a second costs the event loop a list extend per batch, not work per line.
"""

import re

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.markup import escape
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..display import LogFeed, safe_text

__all__ = ["LogFeed", "LogView", "text_width"]



def text_width(lines):
    return max((len(line) if line.isascii() else cell_len(line) for line in lines), default=0)


class LogView(ScrollView, can_focus=True):
    """Lines of a log, the newest kept in view while following; ] / [ walk search matches
    (not n / N: in the Jobs pane, n starts a new job, and a key has one meaning per pane)."""

    BINDINGS = [
        Binding("right_square_bracket,f3", "next_match", "next match", key_display="]"),
        Binding("left_square_bracket,shift+f3", "previous_match", "previous match", key_display="["),
        Binding("escape", "clear_search", "clear search", show=False),
    ]

    def __init__(self, max_lines=200_000, **kwargs):
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self.lines = []
        self.width = 0
        self.following = True
        self.pattern = None  # the compiled search, or None
        self.term = ""
        self.match_line = None
        self.subject = None  # what the log is of: a job id
        self.note = ""  # e.g. "opening", "ended: stopped, signal 15"
        self.ended = False
        self.wrapped = False  # the last jump went round the end of the log
        self.partial = ""  # the unfinished last line, shown below the lines until it ends
        self._line_style = None
        self._strips = LRUCache(1024)  # (line index, scroll_x, width) -> Strip, while no search is shown

    # -- content

    def clear(self):
        self._strips.clear()
        self.lines = []
        self.partial = ""
        self.width = 0
        self.pattern = None
        self.term = ""
        self.match_line = None
        self.virtual_size = Size(0, 0)
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()
        self.refresh_bindings()  # a search of the log before is gone, and its keys with it

    def set_partial(self, text):
        """Show `text` as the log's unfinished last line (a progress bar as it is redrawn)."""
        self.append([], partial=text)

    def append(self, lines, width=None, partial=None):
        """Add whole lines (already cleaned), and with `partial` show that as the unfinished last
        line: one layout and one repaint for a stream's whole batch. Old lines beyond max_lines
        are dropped."""
        if partial is not None and partial != self.partial:
            self.partial = partial
        elif not lines:
            return
        self.lines.extend(lines)
        self.width = max(self.width, text_width(lines) if width is None else width)
        excess = len(self.lines) - self.max_lines
        if excess > self.max_lines // 10:  # drop in steps, not on every batch
            del self.lines[:excess]
            self._strips.clear()
            if self.match_line is not None:
                self.match_line = self.match_line - excess if self.match_line >= excess else None
            if not self.following:
                self.scroll_to(y=max(0, self.scroll_y - excess), animate=False, immediate=True)
        partial_width = cell_len(self.partial) if self.partial else 0
        self._grow_to(Size(max(self.width, partial_width) + 1, len(self.lines) + (1 if self.partial else 0)))
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        if self.pattern is not None:
            self.show_title()  # `line 14 of 26` follows the log as it grows, to its end
        self.refresh()

    def _grow_to(self, size):
        """Set virtual_size. It is a layout reactive: setting it reflows the whole screen (~25 ms
        on a 2-core machine, 20 times a second while a log streams, which is what kept keys
        waiting). While the scrollbars stay as they are, only their range changes: update that
        without the reflow."""
        old = self.virtual_size
        view = self.container_size
        same_bars = (old.height > view.height) == (size.height > view.height) and (old.width > view.width) == (size.width > view.width)
        if same_bars and self.is_mounted and view.height:
            self.set_reactive(LogView.virtual_size, size)
            self._scroll_update(size)
        else:
            self.virtual_size = size

    def set_following(self, following):
        self.following = following
        if following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.show_title()

    def show_title(self):
        """`log j9 (following)`, `log j9 (ended: failed, exit 1)`, with the search's place."""
        if self.subject is None:
            title = "log"
        else:
            parts = [self.note] if self.note else []
            if not self.ended:
                parts.append("following" if self.following else "paused")
            title = "log %s (%s)" % (self.subject, ", ".join(parts))
        if self.search_note:
            title += "  " + self.search_note
        self.border_title = escape(safe_text(title))  # a search term or an error may hold [brackets]

    @property
    def search_note(self):
        """Where the search stands, counted in the log as it is now: `/loss: line 14 of 260`."""
        if self.pattern is None:
            return ""
        if self.match_line is None:
            return "/%s: no match" % self.term
        return "/%s: line %d of %d%s" % (self.term, self.match_line + 1, len(self.lines), ", wrapped" if self.wrapped else "")

    # -- drawing

    def notify_style_update(self):
        super().notify_style_update()
        self._line_style = None
        self._strips.clear()

    def render_line(self, y):
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        # rich_style walks every ancestor; asked once per line it was the cost of streaming.
        style = self._line_style
        if style is None:
            style = self._line_style = self.rich_style
        if index >= len(self.lines):
            if index == len(self.lines) and self.partial:
                text = Text(safe_text(self.partial), style=style, no_wrap=True, end="")
                return Strip(list(text.render(self.app.console))).crop_extend(scroll_x, scroll_x + width, style)
            return Strip.blank(width, style)
        key = (index, scroll_x, width)
        if self.pattern is None and key in self._strips:
            return self._strips[key]
        text = Text(safe_text(self.lines[index]), style=style, no_wrap=True, end="")
        if self.pattern is not None:
            text.highlight_regex(self.pattern, style="black on yellow")
            if index == self.match_line:
                text.stylize("reverse")
        strip = Strip(list(text.render(self.app.console))).crop_extend(scroll_x, scroll_x + width, style)
        if self.pattern is None:
            self._strips[key] = strip
        return strip

    def get_selection(self, selection):
        return selection.extract("\n".join(self.lines)), "\n"

    def selection_updated(self, selection):
        self.refresh()

    # -- search

    def check_action(self, action, parameters):
        if action in ("next_match", "previous_match", "clear_search"):
            return self.pattern is not None  # else n belongs to the pane again (new job)
        return True

    def _search_changed(self):
        self.refresh()
        self.show_title()
        self.refresh_bindings()  # ] and [ come and go with the search in the key bar

    def search(self, term):
        """Highlight every match of `term` and jump to the next one below the top line in view."""
        if not term:
            self.action_clear_search()
            return
        flags = 0 if any(c.isupper() for c in term) else re.IGNORECASE  # smart case, like less
        pattern = re.compile(re.escape(term), flags)
        if self.pattern is None or self.pattern.pattern != pattern.pattern:
            self.match_line = None
        self.pattern, self.term = pattern, term
        self.jump(+1)
        self.refresh_bindings()

    def action_clear_search(self):
        self.pattern = None
        self.term = ""
        self.match_line = None
        self._search_changed()

    def action_next_match(self):
        self.jump(+1)

    def action_previous_match(self):
        self.jump(-1)

    def jump(self, step):
        if self.pattern is None or not self.lines:
            return
        lines = self.lines
        start = self.match_line if self.match_line is not None else round(self.scroll_y) - (1 if step > 0 else 0)
        found = None
        for distance in range(1, len(lines) + 1):
            index = (start + step * distance) % len(lines)
            if self.pattern.search(lines[index]):
                found = index
                break
        if found is None:
            self.match_line = None
        else:
            self.wrapped = found <= start if step > 0 else found >= start
            self.match_line = found
            self.following = False  # else the next lines would scroll the match away
            self.scroll_to(y=max(0, found - self.size.height // 2), animate=False, immediate=True)
        self.refresh()
        self.show_title()
