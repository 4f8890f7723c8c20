"""The ``ferry`` command of a wheel install: runs the command-line tool the wheel ships in
ferry/_bin (the same program a source build installs), with the arguments given."""

from __future__ import annotations

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "ferry")
    if not os.access(exe, os.X_OK):
        sys.exit("ferry: this installation of the Python package has no command-line tool (%s is "
                 "missing); a source build installs it with `make install`, a wheel (ferry-cu13, "
                 "ferry-cu12) ships it" % exe)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
