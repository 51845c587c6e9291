"""A download's files, a page at a time, and the line its job ended with.

A job's record carries only a summary of its files; the rows here are the page of
`download.files` the Downloads pane asked for, each a FileProgress bar, rebuilt only when the
page names other files (a page that moved on updates its bars in place).
"""

from rich.text import Text
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from ..display import STATE_STYLES, console_next_step, safe_text
from ..jobs import model as jobs
from .file_progress import FileProgress
from .form import console_hint
from .model import action, files_line, progress

FILES_PAGE = 20  # file rows shown at once: a page of download.files


class FilesView(Vertical):
    """The head line (which files of how many, the counts) and a bar per file of the page."""

    DEFAULT_CSS = """
    FilesView #downloads-files-head { height: 1; color: $text-muted; }
    FilesView #downloads-files { height: 1fr; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.shown_files = None  # (job id, file paths) the per-file bars were built for

    def compose(self):
        yield Static(id="downloads-files-head")
        yield VerticalScroll(id="downloads-files")

    def show(self, job, page, error):
        """`job`'s files: `page` (a download.files reply of that job, or None: its record's counts
        alone) and the error of the last ask, if any."""
        head = self.query_one("#downloads-files-head", Static)
        text = Text()
        counts = files_line(job, of_total=page is None) if job is not None else ""
        if page is not None and page["total"]:
            first = page["offset"] + 1
            text.append("files {:,}-{:,} of {:,}".format(first, page["offset"] + len(page["files"]), page["total"]))
            if counts:
                text.append("  (%s)" % counts, style="dim")
            if page["total"] > FILES_PAGE:
                text.append("  . next  , previous", style="dim")
        elif counts:
            text.append(counts, style="dim")
        if error:
            text.append("  files not read: %s" % error, style="red")
        head.update(text)
        files = page["files"] if page is not None else []
        self._rebuild(job["id"] if job is not None else None, files)
        for widget, entry in zip(self.query(FileProgress), files):
            widget.show(entry)

    def _rebuild(self, job_id, files):
        key = (job_id, tuple(entry.get("path") for entry in files))
        if key == self.shown_files:
            return
        self.shown_files = key
        container = self.query_one("#downloads-files", VerticalScroll)
        container.remove_children()
        container.mount_all([FileProgress(entry) for entry in files])


def verdict_text(job):
    """The line a download ended with: stopped (and what r does then), its verdict, or its error."""
    found = progress(job)
    verdict = found.get("verdict")
    if verdict and verdict.get("status") == jobs.STOPPED:  # asked for: no failure, and what is kept
        text = Text("stopped: ", style=STATE_STYLES.get(jobs.STOPPED, ""))
        text.append(verdict.get("message") or "")
        text.append("  (r %s)" % ("continues it" if action(job) == "download" else "verifies again"), style="dim")
        return text
    if verdict:
        good = verdict.get("status") == "verified"
        text = Text("verdict: ", style="dim")
        text.append(safe_text(verdict.get("status", "")), style="bold green" if good else "bold red")
        text.append("  " + safe_text(console_next_step(verdict.get("message") or "")))
        if verdict.get("file"):
            text.append("  (%s)" % safe_text(verdict["file"]), style="red")
        return text
    error = found.get("error") or job.get("error")
    if error:
        return Text("error: " + safe_text(console_hint(error.partition(":")[0], console_next_step(error))), style="red")
    return Text("")
