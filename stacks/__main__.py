"""Entry point of the Pulumi program (`main: stacks/` in Pulumi.yaml).

The Python language host runs this directory; the repository root is put on
the path so `stacks`, `components` and `modelplane` import whether or not the
project is installed into the virtualenv.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pulumi  # noqa: E402

from stacks.program import main  # noqa: E402

pulumi.run(main)
