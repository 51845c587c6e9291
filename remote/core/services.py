"""Daemon services: components that live as long as the daemon does (the history store,
the job watcher, samplers), each on its own thread, each isolated from the others.

A service is a `Service` subclass with `start()` (open what it needs), `step()` (one unit of
work, called every `interval_s`) and `stop()`. An exception in any of them is logged, shown in
the service's status and retried with backoff (1 s, 2 s, 4 s ... 60 s): a failing sampler never
takes the daemon down, and a healthy step resets the backoff.
"""

import logging
import threading
import time

log = logging.getLogger("specdeck.services")

BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class Service:
    """Override `step`; `start` and `stop` are optional."""

    name = "service"
    interval_s = 1.0
    # After a failed step, stop() and start() again. A service that keeps work of its own
    # running beside its step (a feed's source workers) sets False: a failure is only reported.
    restart_on_failure = True

    def start(self):
        pass

    def step(self):
        pass

    def stop(self):
        pass

    def detail(self):
        """A short dict shown in the service's status (what it records, how much)."""
        return {}


class ServiceRunner:
    """Runs one service on its own thread and keeps its status."""

    def __init__(self, service):
        self.service = service
        self.state = "starting"
        self.error = None
        self.failures = 0
        self.restarts = 0
        self.last_ok_at = None
        self.next_try_at = None
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="service-%s" % service.name, daemon=True)

    def start(self):
        self._thread.start()

    def wake(self):
        """Run the next step now rather than at the end of the interval."""
        self._wake.set()

    def stop(self, timeout_s=5.0):
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout_s)

    def status(self):
        status = {
            "name": self.service.name,
            "state": self.state,
            "error": self.error,
            "failures": self.failures,
            "restarts": self.restarts,
            "last_ok_at": self.last_ok_at,
            "next_try_at": self.next_try_at,
            "interval_s": self.service.interval_s,
        }
        try:
            status["detail"] = self.service.detail()
        except Exception as exc:  # a status must never fail
            status["detail"] = {"error": str(exc)}
        return status

    def _run(self):
        started = False
        while not self._stopping.is_set():
            try:
                if not started:
                    self.service.start()
                    started = True
                    self.state = "running"
                began = time.monotonic()
                self.service.step()
                self.state, self.error, self.failures, self.next_try_at = "running", None, 0, None
                self.last_ok_at = time.time()
                wait_s = max(0.0, self.service.interval_s - (time.monotonic() - began))
            except Exception as exc:
                self.failures += 1
                wait_s = BACKOFF_S[min(self.failures, len(BACKOFF_S)) - 1]
                self.state = "retrying"
                self.error = "%s: %s" % (type(exc).__name__, exc)
                self.next_try_at = time.time() + wait_s
                log.warning("service %s failed (%d in a row), next try in %.0f s: %s", self.service.name, self.failures, wait_s, self.error,
                            exc_info=self.failures == 1)
                if started and self.service.restart_on_failure:
                    started = self._restart()
            self._wake.wait(wait_s)
            self._wake.clear()
        if started:
            try:
                self.service.stop()
            except Exception:
                log.exception("service %s failed to stop", self.service.name)
        self.state = "stopped"

    def _restart(self):
        """After a failure, stop the service so the next try starts it afresh. Returns False."""
        self.restarts += 1
        try:
            self.service.stop()
        except Exception:
            log.exception("service %s failed to stop after a failure", self.service.name)
        return False


class Services:
    """The daemon's services, started and stopped together, found by name."""

    def __init__(self):
        self._runners = {}

    def add(self, service):
        if service.name in self._runners:
            raise ValueError("a service named %s already runs" % service.name)
        runner = ServiceRunner(service)
        self._runners[service.name] = runner
        runner.start()
        return service

    def get(self, name):
        runner = self._runners.get(name)
        return runner.service if runner else None

    def wake(self, name):
        runner = self._runners.get(name)
        if runner:
            runner.wake()

    def status(self):
        return [runner.status() for runner in self._runners.values()]

    def stop(self):
        for runner in reversed(list(self._runners.values())):
            runner.stop()
