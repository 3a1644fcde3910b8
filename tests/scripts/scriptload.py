"""Loads one of scripts/*.py as a module, for the tests in this folder (the
scripts are programs, not a package on sys.path).

    import sys
    sys.dont_write_bytecode = True  # Before the import: no __pycache__.
    from scriptload import load_script  # noqa: E402

    bm = load_script("bench_multi")  # scripts/bench_multi.py

Standard library only; runs on Debian's /usr/bin/python3.
"""

import importlib.util
import os
import sys

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.

SCRIPTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))), "scripts")


def load_script(name):
    """scripts/<name>.py, run once as a module named `name`."""
    path = os.path.join(SCRIPTS, name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError("cannot load " + path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
