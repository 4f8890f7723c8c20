"""What the tests that start a real server do when it is missing: skip with the reason, or fail
where FERRY_REQUIRE_SERVERS=1 (CI installs every server, so a skip there would hide a broken
install)."""

import importlib.util
import os

import pytest


def need(why):
    """Skips (or fails) the calling test or fixture when `why` names something missing."""
    if not why:
        return
    if os.environ.get("FERRY_REQUIRE_SERVERS") == "1":
        pytest.fail(why + " (FERRY_REQUIRE_SERVERS=1)", pytrace=False)
    pytest.skip(why)


def modules_missing(*names):
    """Why these modules cannot be imported ("" when they can), without importing them."""
    gone = [n for n in names if importlib.util.find_spec(n.split(".")[0]) is None
            or importlib.util.find_spec(n) is None]
    return "not installed: %s (scripts/deps.sh installs it)" % ", ".join(gone) if gone else ""
