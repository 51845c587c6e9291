"""No tests here: the Tensors pane's tests are tests/test_checkpoints_pane.py. This name stays,
as a re-export of tests/helpers, for the modules of the serving and checkpoints rework that
still import it from here; remove it once they import tests.helpers."""

from tests.helpers.pilot import TensorsHost, text_of  # noqa: F401
from tests.helpers.waits import wait_until  # noqa: F401
