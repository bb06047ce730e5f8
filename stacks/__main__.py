"""The Pulumi program of the repository's projects (`main: stacks/` in the root Pulumi.yaml and
in each fleet's): runs modelplane's program, ``modelplane/program/__main__.py``.

This folder is not a package (nothing is installed from it): it holds the entry point and
``requirements.txt``, what `pulumi install` reads beside the program.
"""

import runpy
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

runpy.run_module("modelplane.program", run_name="__main__", alter_sys=True)
