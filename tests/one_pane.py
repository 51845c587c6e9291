"""OnePane lives in tests/helpers/pilot.py; this name stays for the modules that still import it
from here."""

from tests.helpers.pilot import OnePane  # noqa: F401
