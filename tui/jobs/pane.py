"""The Jobs pane: every job on the host with its state and runtime, and the log of one of them
(its last 256 KiB, then followed live while the pane is shown), with search and save; an
ended job can be forgotten (its directory and log removed from the host).

The job list comes from the app's job events (no polling). Log lines are prepared on the
client's reader thread and written to the view in batches, so keys answer while a job
prints fast.
"""

import functools
import os
import time

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input

from .. import display
from ..host.asking import HostError
from ..messages import AgentError, LogSaved
from ..pane import Pane
from ..screens.confirm import ConfirmScreen
from ..screens.prompt import PromptScreen
from ..widgets.log_view import LogFeed, LogView, text_width
from .new_job import NewJobScreen
from .model import COLUMNS, is_live
from .table import JobsTable, job_cells

TAIL_BYTES = 256 * 1024
SAVE_WINDOW_BYTES = 1024 * 1024
LOG_MAX_LINES = 200_000
STOP_GRACE_S = 10.0
RUNTIME_COLUMN = [key for _, key in COLUMNS].index("runtime")
NAME_COLUMN = [key for _, key in COLUMNS].index("name")


class JobsPane(Pane):
    """Jobs table above, the selected job's log below."""

    PANE_TITLE = "Jobs"
    HELP_BINDINGS = JobsTable.BINDINGS + LogView.BINDINGS
    BINDINGS = [
        Binding("n", "new_job", "new", tooltip="start a new job (command line, name, directory)"),
        Binding("s", "stop_job", "stop", tooltip="stop the selected job (TERM, KILL after 10 s)"),
        Binding("slash", "search", "search", tooltip="search the log; ] next match, [ previous"),
        Binding("f", "toggle_follow", "follow", tooltip="follow the log (keep the newest line in view) on/off"),
        Binding("w", "save_log", "save", tooltip="save the whole log to a local file"),
        Binding("x", "forget_job", "forget", tooltip="forget the selected ended job: its directory and log are removed from the host"),
        Binding("escape", "close_search", "close search", show=False),
    ]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.jobs = {}
        self._generation = 0
        self._log_stream = None
        self._book = None
        self._stale = False  # job events arrived while hidden: redraw when shown
        self._select_when_listed = None
        self._opened_on_first_list = False
        self._name_width = None  # the name column's width the cells were cut to

    def compose(self) -> ComposeResult:
        table = JobsTable(id="jobs-table", cursor_type="row", zebra_stripes=True)
        for label, key in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield LogView(max_lines=LOG_MAX_LINES, id="job-log")
        yield Input(placeholder="search the log (enter: next match, escape: close)", id="log-search")

    def on_mount(self):
        self.query_one("#log-search", Input).display = False
        log = self.query_one(LogView)
        log.show_title()
        log.append(["Select a job and press enter to see its log; n starts a new job."])
        self.set_interval(1.0, self._tick_runtimes)

    # ------------------------------------------------------------------ the job list

    def jobs_changed(self, book, changed, records):
        self._book = book
        if self.active:
            self._show_jobs(book.ordered())
        else:
            self._stale = True

    def pane_shown(self):
        if self._stale and self._book is not None:
            self._stale = False
            self._show_jobs(self._book.ordered())

    def _tick_runtimes(self):
        """Running jobs' runtimes move every second without any event."""
        if not self.active:
            return
        table = self.query_one(JobsTable)
        now = time.time()
        for job_id, job in self.jobs.items():
            if is_live(job) and job_id in table.rows:
                table.update_cell(job_id, "runtime", job_cells(job, now)[RUNTIME_COLUMN])

    def on_resize(self, event):
        # The name column takes the width there is: cut the names again once the table has its size.
        self.call_after_refresh(self._fit_names)

    def _fit_names(self):
        table = self.query_one(JobsTable)
        width = table.name_width()
        if width == self._name_width:
            return
        self._name_width = width
        for job_id, job in self.jobs.items():
            if job_id in table.rows:
                table.update_cell(job_id, "name", job_cells(job, name_width=width)[NAME_COLUMN], update_width=True)

    def _show_jobs(self, jobs):
        table = self.query_one(JobsTable)
        now = time.time()
        cursor_key = self.selected_job_id()
        listed = {job["id"]: job for job in jobs}
        shown = {key.value for key in table.rows}
        for job_id in shown - set(listed):
            table.remove_row(job_id)
        log = self.query_one(LogView)
        if log.subject in shown - set(listed):
            log.note, log.ended = "forgotten: no longer on the host", True
            log.show_title()
        name_width = self._name_width or table.name_width()
        for job in jobs:
            cells = job_cells(job, now, name_width)
            if job["id"] not in self.jobs or job["id"] not in shown:
                table.add_row(*cells, key=job["id"])
                continue
            old = job_cells(self.jobs[job["id"]], now, name_width)
            for (_, column), new_cell, old_cell in zip(COLUMNS, cells, old):
                if new_cell != old_cell or column == "runtime":
                    table.update_cell(job["id"], column, new_cell, update_width=True)
        self.jobs = listed
        target = self._select_when_listed or cursor_key
        if not self._opened_on_first_list and jobs:
            self._opened_on_first_list = True
            # Open on what people come to look at: the newest running job, else the newest.
            running = [job for job in jobs if is_live(job)]
            target = (running or jobs)[-1]["id"]
        if target in listed and table.row_count and target != self.selected_job_id():
            table.move_cursor(row=table.get_row_index(target))
        if self._select_when_listed in listed:
            self._select_when_listed = None
            self.open_log(target)
            table.focus()  # the arrow keys go on choosing jobs, not scrolling the new job's log
        # A state or a runtime that grew its column leaves the name less room (or more).
        self.call_after_refresh(self._fit_names)

    def selected_job_id(self):
        table = self.query_one(JobsTable)
        if not table.row_count:
            return None
        try:
            return table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        except Exception:  # the cursor is past the last row while rows change
            return None

    # ------------------------------------------------------------------ the log

    def on_data_table_row_selected(self, event: DataTable.RowSelected):
        event.stop()
        self.open_log(event.row_key.value)

    def open_log(self, job_id):
        """Show the end of `job_id`'s log and follow it; the previous job's stream is cancelled."""
        if self._require_client() is None:
            return
        if self._log_stream is not None:
            self.unfollow(self._log_stream)
            self._log_stream = None
        self._generation += 1
        log = self.query_one(LogView)
        log.clear()
        log.subject, log.note, log.ended, log.following = job_id, "opening", False, True
        log.show_title()
        generation = self._generation
        self.request(
            "jobs.tail", {"id": job_id, "offset": -TAIL_BYTES, "max_bytes": TAIL_BYTES},
            done=functools.partial(self._log_opened, job_id, generation), failed=functools.partial(self._log_failed, generation),
            title="log of %s" % job_id,
        )

    def _log_opened(self, job_id, generation, tail):
        if generation != self._generation:
            return
        feed = LogFeed(tail["next_offset"])
        lines = feed.lines(tail["text"])
        log = self.query_one(LogView)
        log.note = ""
        if tail["offset"] > 0:
            log.append(["… %s earlier in the log (w saves all of it)" % display.format_bytes(tail["offset"])])
        log.append(lines, text_width(lines))
        log.set_partial(feed.shown_partial())
        log.show_title()
        self._log_stream = self.follow(
            "jobs.follow", {"id": job_id, "after": tail["next_offset"]},
            on_data=self._log_lines,
            on_end=functools.partial(self._log_ended, generation, feed),
            prepare=lambda data, seq: (feed.lines(data.get("text", ""), seq), feed.shown_partial()),
            every=0.1,  # ten repaints a second however fast the job prints: keys stay quick
        )

    def _log_lines(self, items):
        """Whole lines and the unfinished last line (a progress bar as it is redrawn)."""
        log = self.query_one(LogView)
        lines = [line for (batch, _), _ in items if batch for line in batch]
        log.append(lines, text_width(lines), partial=items[-1][0][1])

    def _log_failed(self, generation, message):
        if generation == self._generation:
            log = self.query_one(LogView)
            log.note, log.ended = "not followed", True
            log.show_title()

    def _log_ended(self, generation, feed, data):
        if generation != self._generation:
            return
        rest = feed.finish()
        log = self.query_one(LogView)
        log.set_partial("")
        if rest:
            log.append(rest, text_width(rest))
        job = data.get("job") or {}
        if data.get("error"):
            log.note = "not followed: %s" % data["error"]
        else:
            log.note = "ended: %s" % job.get("state", "done")
            if job.get("signal"):
                log.note += ", signal %d" % job["signal"]
            elif job.get("exit_code") is not None:
                log.note += ", exit %d" % job["exit_code"]
        log.ended = True
        self._log_stream = None
        log.show_title()

    def action_toggle_follow(self):
        log = self.query_one(LogView)
        log.set_following(not log.following)

    def action_search(self):
        search = self.query_one("#log-search", Input)
        search.display = True
        search.focus()

    def on_input_submitted(self, event: Input.Submitted):
        if event.input.id == "log-search":
            event.stop()
            self.action_close_search()
            self.query_one(LogView).search(event.value)

    def action_close_search(self):
        search = self.query_one("#log-search", Input)
        if search.display:
            search.display = False
            self.query_one(LogView).focus()

    # ------------------------------------------------------------------ new, stop, save

    def _require_client(self):
        if self.client is None:
            self.notify("not connected to the host yet", severity="warning")
        return self.client

    def action_new_job(self):
        if self._require_client() is not None:
            self.app.push_screen(NewJobScreen(), self._submit)

    def _submit(self, job):
        if job:  # the form has started it: the host's refusals are shown in the form
            self._submitted(job)

    def _submitted(self, job):
        self.notify("started %s: %s" % (job["id"], display.safe_text(job.get("name"))), title="new job", markup=False)
        self._select_when_listed = job["id"]
        # After the form has gone (it gives the focus back to what had it, the log maybe): the
        # table, so the arrow keys move among the jobs.
        self.call_after_refresh(self.query_one(JobsTable).focus)
        if self._book is not None and job["id"] in self._book.jobs:
            self._show_jobs(self._book.ordered())  # its event came before the reply

    def action_stop_job(self):
        job = self.jobs.get(self.selected_job_id())
        if self._require_client() is None or job is None:
            return
        if not is_live(job):
            self.notify("%s is not running (%s)" % (job["id"], job.get("state")), severity="warning", markup=False)
            return
        question = "Stop %s (%s)?\nTERM to its processes now, KILL after %d s if still running." % (
            job["id"], display.safe_text(job.get("name")), STOP_GRACE_S)
        if job.get("foreign"):  # the user's own Slurm job: said plainly, since specdeck did not start it
            question = "Cancel Slurm job %s (%s)?\nspecdeck did not start it. scancel: TERM now, KILL after %d s if still running." % (
                job.get("slurm_id"), display.safe_text(job.get("name")), STOP_GRACE_S)
        elif job.get("slurm_id"):
            question = "Stop %s (Slurm job %s, %s)?\nscancel: TERM now, KILL after %d s if still running." % (
                job["id"], job["slurm_id"], display.safe_text(job.get("name")), STOP_GRACE_S)

        def answered(yes):
            if yes:
                self.request("jobs.stop", {"id": job["id"], "grace_s": STOP_GRACE_S},
                             done=lambda stopped: self.notify("stopping %s" % stopped["id"], markup=False), title="could not stop %s" % job["id"])

        self.app.push_screen(ConfirmScreen(question, yes_label="Stop"), answered)

    def action_forget_job(self):
        job = self.jobs.get(self.selected_job_id())
        if self._require_client() is None or job is None:
            return
        if is_live(job):
            self.notify("%s is still running: s stops it, then x forgets it" % job["id"], severity="warning", markup=False)
            return
        question = "Forget %s (%s)?\nIts directory and its whole log are removed from the host; this cannot be undone." % (
            job["id"], display.safe_text(job.get("name")))

        def answered(yes):
            if yes:
                self.request("jobs.forget", {"ids": [job["id"]]}, done=functools.partial(self._forgotten, job["id"]),
                             title="could not forget %s" % job["id"])

        self.app.push_screen(ConfirmScreen(question, yes_label="Forget"), answered)

    def _forgotten(self, job_id, reply):
        # The row goes when the host's job events say `removed`; the reply says what happened.
        if job_id in (reply.get("forgotten") or ()):
            self.notify("forgot %s" % job_id, markup=False)
        elif job_id in (reply.get("not_found") or ()):
            self.notify("%s was already gone from the host" % job_id, severity="warning", markup=False)

    def action_save_log(self):
        job_id = self.query_one(LogView).subject or self.selected_job_id()
        if self._require_client() is None or job_id is None:
            return

        def answered(path):
            if path:
                self._save_log(self.model, job_id, path)

        self.app.push_screen(PromptScreen("Save the whole log of %s to this file (on this computer):" % job_id, "./%s.log" % job_id), answered)

    @work(thread=True, group="jobs-save", exit_on_error=False)
    def _save_log(self, model, job_id, path):
        path = os.path.abspath(os.path.expanduser(path))
        part = path + ".part"
        offset = written = 0
        try:
            with open(part, "wb") as out:
                while True:
                    window = model.call("jobs.tail", {"id": job_id, "offset": offset, "max_bytes": SAVE_WINDOW_BYTES}, timeout=120)
                    data = window["text"].encode("utf-8")
                    out.write(data)
                    written += len(data)
                    offset = window["next_offset"]
                    if window["next_offset"] == window["offset"] or offset >= window["size"]:
                        break
            os.replace(part, path)
        except OSError as exc:
            self.post_message(AgentError("cannot write %s: %s" % (path, exc.strerror or exc), "save log"))
        except HostError as exc:
            self.post_message(AgentError(str(exc.failure), "save log of %s" % job_id))
        else:
            self.post_message(LogSaved(job_id, path, written))
            return
        try:
            os.unlink(part)
        except OSError:
            pass

    def on_log_saved(self, message: LogSaved):
        self.notify("saved the log of %s to %s: %s" % (message.job_id, message.path, display.format_bytes(message.size_bytes)), markup=False)
