"""No tests here: the console's Jobs tests are tests/test_jobs_console.py. This name stays, as
a re-export of tests/helpers, for the modules of the serving rework that still import it from
here; remove it once they import tests.helpers."""

from tests.helpers.waits import wait_until  # noqa: F401
