"""The report over [since, until): its sections in the order people read them, each read on its
own (one that fails, or finds the history store not open, says so in `errors` and the others
stand), all within DEADLINE_S (sections left when it passes are named in `cut`)."""

import logging
import time

from ..history.query import HistoryUnavailable
from . import sections

log = logging.getLogger("specdeck.report")

DEADLINE_S = 10.0
SECTIONS = ("jobs", "training", "servers", "downloads", "alerts", "disks", "daemon")


def build(daemon, since, until, deadline_s=DEADLINE_S):
    """`{since, until, host, jobs, training, servers, downloads, alerts, disks, daemon, errors, cut}`."""
    began = time.monotonic()
    history = getattr(daemon, "history", None)
    store = history.store if history is not None else None
    errors, cut = {}, []
    jobs = []
    try:
        jobs = sections.window_jobs(daemon, since, until)
    except Exception as exc:
        errors["jobs"] = "%s: %s" % (type(exc).__name__, exc)
    readers = {
        "jobs": lambda: sections.job_rows(jobs, store, since, until),
        "training": lambda: sections.training_rows(jobs, store, daemon, since, until),
        "servers": lambda: sections.server_rows(jobs, store, since, until),
        "downloads": lambda: sections.download_rows(jobs, since, until),
        "alerts": lambda: sections.alert_rows(since, until),
        "disks": lambda: sections.disk_rows(store, since, until),
        "daemon": lambda: sections.daemon_section(daemon, since, until),
    }
    report = {"since": since, "until": until, "host": daemon.hello.get("hostname")}
    for name in SECTIONS:
        report[name] = {} if name == "daemon" else []
        if time.monotonic() - began > deadline_s:
            cut.append(name)
            continue
        try:
            report[name] = readers[name]()
        except HistoryUnavailable as exc:
            errors[name] = str(exc)
        except Exception as exc:  # one source that fails never stops the others
            log.exception("report: the %s section failed", name)
            errors[name] = "%s: %s" % (type(exc).__name__, exc)
    sections.attach_episodes(report)
    report["errors"], report["cut"] = errors, cut
    report["took_s"] = round(time.monotonic() - began, 3)
    return report
