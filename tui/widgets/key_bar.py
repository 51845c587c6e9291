"""The key bar at the bottom of the console: the keys that work here and now, one line.

Textual's Footer builds a widget for each key and builds them all again whenever the focus
moves or a pane changes; on a 2-core machine that was a good part of a pane switch (~30 widgets
composed and styled per switch). This bar renders the same line as text and only redraws:
the keys come from the screen's active bindings, a group (the number keys) is one entry, and a
click on an entry runs its action as the Footer's would.

A narrow terminal gets the same keys written closer: one space between entries instead of two,
then each label's short form (`SHORT_LABELS` of the node that binds it, else its first word),
so at 80 columns every key of a pane is on the bar. Only narrower than that are pane keys left
out, from the end, never the app's own (`1-6 panes`, `? help`, which lists every key).
"""

from typing import NamedTuple

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.widget import Widget


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
    """Cells of ` key label ` (` key label` when compact: the bar adds one space at its end)."""
    return cell_len(" %s %s" % (entry.key, entry.description)) + (0 if compact else 1)


def bar_width(entries, compact):
    return sum(entry_width(entry, compact) for entry in entries) + (1 if compact and entries else 0)


def fit(entries, width, kept):
    """(entries, compact) that fit in `width` cells, the widest way that fits: spaced, then
    compact (one space between entries), then compact with short labels. When none fits, the
    pane's keys are left out from the last one back; the app's own keys (`kept(node)`: quit,
    the panes, help) stay whatever the width, so `? help` is always on the bar."""
    entries = list(entries)
    if not width:
        return entries, False
    shortened = [entry._replace(description=entry.short) for entry in entries]
    for shown, compact in ((entries, False), (entries, True), (shortened, True)):
        if bar_width(shown, compact) <= width:
            return shown, compact
    for index in range(len(shortened) - 1, -1, -1):
        if bar_width(shortened, True) <= width:
            break
        if not kept(shortened[index].node):
            shortened.pop(index)
    return shortened, True


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
        self._spans = []  # (first cell, last cell + 1, action, the node that binds it)

    def on_mount(self):
        self.screen.bindings_updated_signal.subscribe(self, lambda screen: self.refresh())

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

    def render(self):
        entries, compact = fit(self.entries(), self.size.width, lambda node: node is self.app)
        text = Text(no_wrap=True, overflow="ellipsis")
        spans = []
        key_style = "bold %s" % self.app.get_css_variables().get("footer-key-foreground", "")
        for entry in entries:
            start = len(text)
            text.append(" %s " % entry.key, style=key_style if entry.enabled else "dim")
            text.append(entry.description if compact else "%s " % entry.description, style="" if entry.enabled else "dim")
            spans.append((start, len(text), entry.action, entry.node))
        if compact and entries:
            text.append(" ")
        self._spans = spans
        return text

    async def on_click(self, event: events.Click):
        for start, end, action, node in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action, node)
                return
