"""The table of the host's jobs, and the cells of one job: its figures (model.py), the state
coloured, the name cut to the room there is."""

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from .. import display
from . import model
from .model import COLUMNS

NAME_WIDTH = 40  # until the table knows its width
NAME_MIN_WIDTH = 12
# Cells the other columns are counted at least (the widest word each commonly holds), so that
# a state that grows from `running` to `downloading` does not push the row past the edge.
MIN_WIDTHS = {"id": 4, "kind": 9, "state": 11, "runtime": 8, "exit": 4, "started": 5}


def job_cells(job, now=None, name_width=NAME_WIDTH):
    """The table cells of one job, in COLUMNS' order, as `specdeck jobs` writes them; the name cut
    to `name_width` cells."""
    shown = model.figures(job, now)
    shown["state"] = Text(shown["state"], style=display.STATE_STYLES.get(job.get("state"), ""))
    shown["name"] = Text(shown["name"], no_wrap=True)
    shown["name"].truncate(name_width, overflow="ellipsis")
    return tuple(shown[key] for _, key in COLUMNS)


class JobsTable(DataTable):
    """The job list; enter opens the highlighted job's log."""

    BINDINGS = [Binding("enter", "select_cursor", "open", tooltip="open the job's log")]

    def name_width(self):
        """The cells the name column can take: what the table's width leaves after the others
        (and a vertical scrollbar, should one come), NAME_WIDTH before it is laid out."""
        width = self.size.width
        if not width:
            return NAME_WIDTH
        others = sum(max(column.content_width, MIN_WIDTHS.get(str(column.key.value), 0)) + 2 * self.cell_padding
                     for column in self.columns.values() if column.key.value != "name")
        scrollbar = self.styles.scrollbar_size_vertical
        return max(NAME_MIN_WIDTH, width - others - 2 * self.cell_padding - scrollbar)
