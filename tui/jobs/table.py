"""The table of the host's jobs, and the cells of one job as the user reads them."""

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from .. import display

NAME_WIDTH = 40  # until the table knows its width
NAME_MIN_WIDTH = 12
# What a babysitter reads first comes first; the name, the widest, is last, so a narrow
# terminal cuts the name, never the state, runtime or exit code.
COLUMNS = (("id", "id"), ("kind", "kind"), ("state", "state"), ("runtime", "runtime"), ("exit", "exit"), ("started", "started"), ("name", "name"))
# Cells the other columns are counted at least (the widest word each commonly holds), so that
# a state that grows from `running` to `downloading` does not push the row past the edge.
MIN_WIDTHS = {"id": 4, "kind": 9, "state": 11, "runtime": 8, "exit": 4, "started": 5}


def job_cells(job, now=None, name_width=NAME_WIDTH):
    """The table cells of one job, as the user reads them; the name cut to `name_width` cells."""
    state = Text(job.get("state") or "?", style=display.STATE_STYLES.get(job.get("state"), ""))
    name = Text(job.get("name") or "", no_wrap=True)
    name.truncate(name_width, overflow="ellipsis")
    return (
        job["id"], job.get("kind") or "", state, display.format_duration(display.job_runtime(job, now)), display.exit_text(job),
        display.format_time(job.get("started_at")), name,
    )


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
