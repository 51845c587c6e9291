"""The driver of a tab's console under `specdeck web`: textual's web driver, except that a
console whose server is gone quits.

textual's driver stops reading when its stdin (the server's pipe) closes and leaves the app
running, with no one to see it and nothing to end it: a server killed outright left every tab's
console behind, busy redrawing for no one and reconnecting to its hosts (starting a local daemon
again after `daemon stop`).
"""

from textual import messages
from textual.drivers.web_driver import WebDriver


class ConsoleDriver(WebDriver):
    def run_input_thread(self):
        try:
            super().run_input_thread()
        finally:
            if not self.exit_event.is_set():  # the input ended without the app ending: the server went
                self._app.post_message(messages.ExitApp())
