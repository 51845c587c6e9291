"""The key bar at the bottom of the console: the keys that work here and now, one line.

Textual's Footer builds a widget for each key and builds them all again whenever the focus
moves or a pane changes; on a 2-core machine that was a good part of a pane switch (~30 widgets
composed and styled per switch). This bar renders the same line as text and only redraws:
the keys come from the screen's active bindings, a group (the number keys) is one entry, and a
click on an entry runs its action as the Footer's would. A narrow terminal drops pane keys
from the end, never the app's own (`1-6 panes`, `? help`).
"""

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.widget import Widget


def entry_width(entry):
    key, description = entry[0], entry[1]
    return cell_len(" %s %s " % (key, description))


def fit(entries, width, kept):
    """The entries that fit in `width` cells. The app's own keys (`kept(node)`: quit, the
    panes, help) stay whatever the width, so `? help`, which lists every key, is always on
    the bar; the pane's keys that do not fit are left out from the last one back."""
    if not width:
        return entries
    entries = list(entries)
    total = sum(entry_width(entry) for entry in entries)
    for index in range(len(entries) - 1, -1, -1):
        if total <= width:
            break
        if not kept(entries[index][4]):
            total -= entry_width(entries.pop(index))
    return entries


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

    def render(self):
        entries = []  # (key, description, enabled, action, node)
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
            entries.append((key, binding.description, enabled, binding.action, node))
        entries = fit(entries, self.size.width, lambda node: node is self.app)
        text = Text(no_wrap=True, overflow="ellipsis")
        spans = []
        key_style = "bold %s" % self.app.get_css_variables().get("footer-key-foreground", "")
        for key, description, enabled, action, node in entries:
            start = len(text)
            text.append(" %s " % key, style=key_style if enabled else "dim")
            text.append("%s " % description, style="" if enabled else "dim")
            spans.append((start, len(text), action, node))
        self._spans = spans
        return text

    async def on_click(self, event: events.Click):
        for start, end, action, node in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action, node)
                return
