"""enginebench as a pip-installed command.

The `enginebench` console script runs the Rust command line inside this
interpreter (`enginebench_native.cli_main`), and makes this interpreter the
default for the engine workers it starts, so `enginebench run recipe.toml`
measures the vLLM installed here with nothing else set.
"""

import os
import signal
import sys

from . import enginebench_native


def main():
    # The workers load the same extension file this package ships.
    os.environ.setdefault("ENGINEBENCH_NATIVE", enginebench_native.__file__)
    os.environ.setdefault("ENGINEBENCH_HOST_PYTHON", sys.executable)
    # The Rust side handles Ctrl-C itself (graceful stop, then kill).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(enginebench_native.cli_main(["enginebench", *sys.argv[1:]]))
