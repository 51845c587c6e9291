"""The tabs' titles at the terminal's width: `3 Downloads` where every full title fits on the
tab row, `3 Down` where only the short ones do (a phone's browser, ~64 columns), the number
alone below that. The number is always there: it is the pane's key, and every tab stays one
click (or tap) wide enough to hit."""

from textual.widgets import TabbedContent

TAB_PADDING = 2  # the cells around a tab's label (Textual's Tab: padding 0 1)


def titles(numbered, width):
    """Each tab's title, [(number, pane_class)] in order, in the longest spelling whose row fits
    `width` cells (a pane's SHORT_TITLE, else its PANE_TITLE, is the short one)."""
    spellings = (["%d %s" % (number, pane.PANE_TITLE) for number, pane in numbered],
                 ["%d %s" % (number, getattr(pane, "SHORT_TITLE", None) or pane.PANE_TITLE) for number, pane in numbered])
    for names in spellings:
        if sum(len(name) + TAB_PADDING for name in names) <= width:
            return names
    return [str(number) for number, _ in numbered]


def retitle(app, numbered, width):
    """Give the app's tabs their titles for `width`; a tab's label is set only when it changes
    (each change lays the tab row out again)."""
    for tabs in app.query(TabbedContent):
        for (_, pane), name in zip(numbered, titles(numbered, width)):
            tab = tabs.get_tab(pane.pane_id())
            if tab.label_text != name:
                tab.label = name
