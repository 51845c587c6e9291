"""The key bar at the bottom of the console: the keys that work here and now.

Textual's Footer builds a widget for each key and builds them all again whenever the focus
moves or a pane changes; on a 2-core machine that was a good part of a pane switch (~30 widgets
composed and styled per switch). This bar renders the same line as text and only redraws:
the keys come from the screen's active bindings, a group (the number keys) is one entry, and a
click on an entry runs its action as the Footer's would.

A narrow terminal gets the same keys written closer: one space between entries instead of two,
then each label's short form (`SHORT_LABELS` of the node that binds it, else its first word),
then over two lines, so at 80 columns every key of a pane is on the bar. Only when two lines
cannot hold them are pane keys left out, from the end, never the app's own (`1-6 panes`,
`? help`, which lists every key).
"""

from typing import NamedTuple

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.widget import Widget

MAX_LINES = 2


class Entry(NamedTuple):
    key: str
    description: str
    short: str  # the label when the bar is short of room
    enabled: bool
    action: str
    node: object  # what binds it


def short_label(binding, node):
    """The node's `SHORT_LABELS[action]`, else the description's first word."""
    given = (getattr(node, "SHORT_LABELS", None) or {}).get(binding.action)
    return given or (binding.description.split() or [""])[0]


def entry_width(entry, compact=False):
    """Cells of ` key label ` (` key label` when compact: the line ends with one space)."""
    return cell_len(" %s %s" % (entry.key, entry.description)) + (0 if compact else 1)


def line_width(entries, compact):
    return sum(entry_width(entry, compact) for entry in entries) + (1 if compact and entries else 0)


def wrap(entries, width):
    """Compact entries as lines of at most `width` cells, in their order."""
    lines = [[]]
    for entry in entries:
        if lines[-1] and line_width(lines[-1] + [entry], True) > width:
            lines.append([])
        lines[-1].append(entry)
    return lines


def fit(entries, width, kept):
    """(lines of entries, compact) that fit in `width` cells, the widest way that does: one
    spaced line, one compact line (one space between entries), one compact line of short
    labels, then up to MAX_LINES of those. When even that does not hold them, the pane's keys
    are left out from the last one back; the app's own keys (`kept(node)`: quit, the panes,
    help) stay whatever the width, so `? help` is always on the bar."""
    entries = list(entries)
    if not width:
        return [entries], False
    shortened = [entry._replace(description=entry.short) for entry in entries]
    for shown, compact in ((entries, False), (entries, True), (shortened, True)):
        if line_width(shown, compact) <= width:
            return [shown], compact
    lines = wrap(shortened, width)
    for index in range(len(shortened) - 1, -1, -1):
        if len(lines) <= MAX_LINES:
            break
        if not kept(shortened[index].node):
            shortened.pop(index)
            lines = wrap(shortened, width)
    return lines[:MAX_LINES], True


class KeyBar(Widget):
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-foreground;
    }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._spans = []  # (line, first cell, last cell + 1, action, the node that binds it)

    def on_mount(self):
        self.screen.bindings_updated_signal.subscribe(self, lambda screen: self._fit_height())

    def on_resize(self, event):
        self._fit_height()

    def _fit_height(self):
        """One line, or two when the keys need them (a narrow terminal, many keys)."""
        lines, _compact = self.fitted()
        height = max(1, len(lines))
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height
        self.refresh()

    def entries(self):
        """The keys of the active bindings that show, one per action and per group."""
        entries = []
        seen_actions, seen_groups = set(), set()
        for node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen_actions:
                continue
            seen_actions.add(binding.action)
            if binding.group is not None:
                if binding.group in seen_groups:
                    continue
                seen_groups.add(binding.group)
            key = binding.key_display or self.app.get_key_display(binding)
            entries.append(Entry(key, binding.description, short_label(binding, node), enabled, binding.action, node))
        return entries

    def fitted(self):
        return fit(self.entries(), self.size.width, lambda node: node is self.app)

    def render(self):
        lines, compact = self.fitted()
        text = Text(no_wrap=True, overflow="ellipsis")
        spans = []
        key_style = "bold %s" % self.app.get_css_variables().get("footer-key-foreground", "")
        for number, line in enumerate(lines):
            if number:
                text.append("\n")
            line_start = len(text)
            for entry in line:
                start = len(text) - line_start
                text.append(" %s " % entry.key, style=key_style if entry.enabled else "dim")
                text.append(entry.description if compact else "%s " % entry.description, style="" if entry.enabled else "dim")
                spans.append((number, start, len(text) - line_start, entry.action, entry.node))
            if compact and line:
                text.append(" ")
        self._spans = spans
        return text

    async def on_click(self, event: events.Click):
        for line, start, end, action, node in self._spans:
            if line == event.y and start <= event.x < end:
                await self.app.run_action(action, node)
                return
