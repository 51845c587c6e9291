import sys

from .main import COMMAND_NAMES, exit_now, main

code = main()
if sys.argv[1:2] and sys.argv[1] in COMMAND_NAMES:
    exit_now(code)
sys.exit(code)
