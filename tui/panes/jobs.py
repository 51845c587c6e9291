"""The Jobs pane: every job on the host with its state and runtime, and the log of one of them
(its last 256 KiB, then followed live), with search and save.

All requests run in thread workers that post messages back; log lines are prepared on the
client's reader thread and written to the view in batches, so keys answer while a job
prints fast.
"""

import os
import threading
import time

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import DataTable, Input

from remote.core.protocol import RemoteError

from .. import display
from ..client import ConnectError
from ..messages import AgentError, JobsListed, JobStopRequested, JobSubmitted, LogChunk, LogEnded, LogOpened, LogSaved
from ..screens.confirm import ConfirmScreen
from ..screens.new_job import NewJobScreen
from ..screens.prompt import PromptScreen
from ..widgets.jobs_table import COLUMNS, JobsTable, job_cells
from ..widgets.log_view import LogFeed, LogView, text_width

TAIL_BYTES = 256 * 1024
SAVE_WINDOW_BYTES = 1024 * 1024
LOG_MAX_LINES = 200_000
LOG_FLUSH_S = 0.05
STOP_GRACE_S = 10.0


class JobsPane(Widget):
    """Jobs table above, the selected job's log below."""

    PANE_TITLE = "Jobs"
    BINDINGS = [
        Binding("n", "new_job", "new", tooltip="start a new job (command line, name, directory)"),
        Binding("s", "stop_job", "stop", tooltip="stop the selected job (TERM, KILL after 10 s)"),
        Binding("slash", "search", "search", tooltip="search the log; n next match, N previous"),
        Binding("f", "toggle_follow", "follow", tooltip="follow the log (keep the newest line in view) on/off"),
        Binding("w", "save_log", "save", tooltip="save the whole log to a local file"),
        Binding("escape", "close_search", "close search", show=False),
    ]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.jobs = {}
        self._generation = 0
        self._subscription = None
        self._subscription_lock = threading.Lock()
        self._pending_lines = []
        self._pending_width = 0
        self._flush_timer = None
        self._list_worker = None
        self._select_when_listed = None

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
        self.set_interval(1.0, self.refresh_jobs)

    # ------------------------------------------------------------------ the job list

    def on_client_ready(self, message):
        self.refresh_jobs()

    def refresh_jobs(self):
        if self.app.client is None or (self._list_worker is not None and not self._list_worker.is_finished):
            return
        self._list_worker = self._list_jobs(self.app.client)

    @work(thread=True, exclusive=True, group="jobs", exit_on_error=False)
    def _list_jobs(self, client):
        try:
            self.post_message(JobsListed(client.call("jobs.list", timeout=15)))
        except RemoteError as exc:
            self.post_message(AgentError(exc.message, "jobs.list"))
        except ConnectError:
            pass  # the header says why; the next tick tries again

    def on_jobs_listed(self, message):
        table = self.query_one(JobsTable)
        now = time.time()
        cursor_key = self.selected_job_id()
        listed = {job["id"]: job for job in message.jobs}
        shown = {key.value for key in table.rows}
        for job_id in shown - set(listed):
            table.remove_row(job_id)
        for job in message.jobs:
            cells = job_cells(job, now)
            if job["id"] not in self.jobs or job["id"] not in shown:
                table.add_row(*cells, key=job["id"])
                continue
            old = job_cells(self.jobs[job["id"]], now)
            for (_, column), new_cell, old_cell in zip(COLUMNS, cells, old):
                if new_cell != old_cell or column == "runtime":
                    table.update_cell(job["id"], column, new_cell, update_width=True)
        self.jobs = listed
        target = self._select_when_listed or cursor_key
        if target in listed and table.row_count and target != self.selected_job_id():
            table.move_cursor(row=table.get_row_index(target))
        if self._select_when_listed in listed:
            self._select_when_listed = None
            self.open_log(target)

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
        client = self._require_client()
        if client is None:
            return
        with self._subscription_lock:
            self._generation += 1
            old, self._subscription = self._subscription, None
        self._pending_lines, self._pending_width = [], 0
        log = self.query_one(LogView)
        log.clear()
        log.subject, log.note, log.ended, log.following = job_id, "opening", False, True
        log.show_title()
        self._start_log(client, job_id, self._generation, old)

    @work(thread=True, exclusive=True, group="log", exit_on_error=False)
    def _start_log(self, client, job_id, generation, old_subscription):
        if old_subscription is not None:
            old_subscription.cancel()
        try:
            tail = client.call("jobs.tail", {"id": job_id, "offset": -TAIL_BYTES, "max_bytes": TAIL_BYTES})
            feed = LogFeed(tail["next_offset"])
            lines = feed.lines(tail["text"])
            self.post_message(LogOpened(job_id, generation, lines, text_width(lines), tail["offset"], tail["next_offset"]))

            def on_data(data, seq):  # on the client's reader thread
                lines = feed.lines(data.get("text", ""), seq)
                if lines:
                    self.post_message(LogChunk(job_id, generation, lines, text_width(lines), seq))

            def on_end(data):
                rest = feed.finish()
                if rest:
                    self.post_message(LogChunk(job_id, generation, rest, text_width(rest), feed.next_offset))
                self.post_message(LogEnded(job_id, generation, data.get("job"), data.get("error", "")))

            subscription = client.subscribe("jobs.follow", {"id": job_id, "after": tail["next_offset"]}, on_data, on_end)
        except RemoteError as exc:
            self.post_message(AgentError(exc.message, "log of %s" % job_id))
            self.post_message(LogEnded(job_id, generation, None, exc.message))
            return
        except ConnectError as exc:
            self.post_message(LogEnded(job_id, generation, None, str(exc)))
            return
        with self._subscription_lock:
            if generation == self._generation:
                self._subscription = subscription
                return
        subscription.cancel()  # another job was opened meanwhile

    def on_log_opened(self, message: LogOpened):
        if message.generation != self._generation:
            return
        log = self.query_one(LogView)
        log.note = ""
        if message.offset > 0:
            log.append(["… %s earlier in the log (w saves all of it)" % display.format_bytes(message.offset)])
        log.append(message.lines, message.width)
        log.show_title()

    def on_log_chunk(self, message: LogChunk):
        # Chunks are batched, never merged or dropped: one write per LOG_FLUSH_S at most.
        if message.generation != self._generation:
            return
        self._pending_lines.extend(message.lines)
        self._pending_width = max(self._pending_width, message.width)
        if self._flush_timer is None:
            self._flush_timer = self.set_timer(LOG_FLUSH_S, self._flush_log)

    def _flush_log(self):
        if self._flush_timer is not None:
            self._flush_timer.stop()
        self._flush_timer = None
        lines, self._pending_lines = self._pending_lines, []
        self.query_one(LogView).append(lines, self._pending_width)

    def on_log_ended(self, message: LogEnded):
        if message.generation != self._generation:
            return
        self._flush_log()
        log = self.query_one(LogView)
        job = message.job or {}
        if message.error:
            log.note = "not followed: %s" % message.error
        else:
            log.note = "ended: %s" % job.get("state", "done")
            if job.get("signal"):
                log.note += ", signal %d" % job["signal"]
            elif job.get("exit_code") is not None:
                log.note += ", exit %d" % job["exit_code"]
        log.ended = True
        with self._subscription_lock:
            self._subscription = None
        log.show_title()
        self.refresh_jobs()

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
        if self.app.client is None:
            self.notify("not connected to the host yet", severity="warning")
        return self.app.client

    def action_new_job(self):
        if self._require_client() is not None:
            self.app.push_screen(NewJobScreen(), self._submit)

    def _submit(self, params):
        if params:
            self._submit_job(self.app.client, params)

    @work(thread=True, group="jobs-submit", exit_on_error=False)
    def _submit_job(self, client, params):
        try:
            self.post_message(JobSubmitted(client.call("jobs.submit", params, timeout=60)))
        except RemoteError as exc:
            self.post_message(AgentError(exc.message, "could not start the job"))
        except ConnectError as exc:
            self.post_message(AgentError(str(exc), "could not start the job"))

    def on_job_submitted(self, message: JobSubmitted):
        self.notify("started %s: %s" % (message.job["id"], message.job.get("name") or ""), title="new job", markup=False)
        self._select_when_listed = message.job["id"]
        self.query_one(JobsTable).focus()
        self.refresh_jobs()

    def action_stop_job(self):
        job = self.jobs.get(self.selected_job_id())
        if self._require_client() is None or job is None:
            return
        if job.get("process_state", job.get("state")) not in ("running", "starting"):
            self.notify("%s is not running (%s)" % (job["id"], job.get("state")), severity="warning", markup=False)
            return
        question = "Stop %s (%s)?\nTERM to its processes now, KILL after %d s if still running." % (
            job["id"], job.get("name") or "", STOP_GRACE_S)

        def answered(yes):
            if yes:
                self._stop_job(self.app.client, job["id"])

        self.app.push_screen(ConfirmScreen(question, yes_label="Stop"), answered)

    @work(thread=True, group="jobs-stop", exit_on_error=False)
    def _stop_job(self, client, job_id):
        try:
            self.post_message(JobStopRequested(client.call("jobs.stop", {"id": job_id, "grace_s": STOP_GRACE_S})))
        except (RemoteError, ConnectError) as exc:
            self.post_message(AgentError(getattr(exc, "message", str(exc)), "could not stop %s" % job_id))

    def on_job_stop_requested(self, message: JobStopRequested):
        self.notify("stopping %s" % message.job["id"], markup=False)
        self.refresh_jobs()

    def action_save_log(self):
        job_id = self.query_one(LogView).subject or self.selected_job_id()
        if self._require_client() is None or job_id is None:
            return

        def answered(path):
            if path:
                self._save_log(self.app.client, job_id, path)

        self.app.push_screen(PromptScreen("Save the whole log of %s to this file (on this computer):" % job_id, "./%s.log" % job_id), answered)

    @work(thread=True, group="jobs-save", exit_on_error=False)
    def _save_log(self, client, job_id, path):
        path = os.path.abspath(os.path.expanduser(path))
        part = path + ".part"
        offset = written = 0
        try:
            with open(part, "wb") as out:
                while True:
                    window = client.call("jobs.tail", {"id": job_id, "offset": offset, "max_bytes": SAVE_WINDOW_BYTES}, timeout=120)
                    data = window["text"].encode("utf-8")
                    out.write(data)
                    written += len(data)
                    offset = window["next_offset"]
                    if window["next_offset"] == window["offset"] or offset >= window["size"]:
                        break
            os.replace(part, path)
        except OSError as exc:
            self.post_message(AgentError("cannot write %s: %s" % (path, exc.strerror or exc), "save log"))
        except (RemoteError, ConnectError) as exc:
            self.post_message(AgentError(getattr(exc, "message", str(exc)), "save log of %s" % job_id))
        else:
            self.post_message(LogSaved(job_id, path, written))
            return
        try:
            os.unlink(part)
        except OSError:
            pass

    def on_log_saved(self, message: LogSaved):
        self.notify("saved the log of %s to %s (%s)" % (message.job_id, message.path, display.format_bytes(message.size_bytes)), markup=False)

    def on_unmount(self):
        with self._subscription_lock:
            subscription, self._subscription = self._subscription, None
        if subscription is not None:
            threading.Thread(target=subscription.cancel, daemon=True).start()
