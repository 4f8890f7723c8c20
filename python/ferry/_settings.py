"""ferry.settings: the process-wide settings, readable, settable and usable as a context.

Each attribute is one FERRY_* environment variable without the prefix, in lower case:
``threads``, ``task_size``, ``staging_buffer_size``, ``staging_buffers``,
``staging_memory_limit``, ``stream_lanes``, ``lane_buffer_size``, ``lane_threshold``, ``gds``,
``gds_threshold``, ``direct_io``, ``io_uring``, ``io_uring_queue_depth``, ``log_level``,
``cufile_library``, and for remote objects ``remote_concurrency``, ``remote_range_size``,
``remote_connect_timeout``, ``remote_timeout``, ``remote_retry_delay`` (milliseconds, or text
such as "10s"), ``remote_retries``, ``remote_ca_bundle`` and ``s3_addressing``
(docs/settings.md describes each). Values are ints, or strings for the
modes; sizes may also be given as text ("8M", "1GiB"). 0 means "derive from this machine".

>>> import ferry
>>> ferry.settings.threads = 8                 # files opened from now on use 8 threads
>>> with ferry.settings(gds="off", task_size="16M"):
...     pass                                   # inside: cuFile off; afterwards: as before
>>> ferry.settings.as_dict()["threads"]
8

The settings are global to the process (not per thread): a change affects files opened
afterwards, in every thread. The environment is read once, when ferry is first used.

A FERRY_* variable that does not parse makes every call that reads files raise SettingsError
(naming the variable) until code sets that setting: ``ferry.settings.threads = 8`` fixes a bad
``FERRY_THREADS``. Meanwhile the settings can be read (the bad one shows its default) and
``repr(ferry.settings)`` says what is wrong.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import _ferry

__all__ = ["Settings", "settings"]

_NAMES = tuple(_ferry.settings_names())


def _text(value: Any) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    if value is None:
        return "0"
    return str(value)


class _Override:
    """What ``ferry.settings(...)`` returns: applied on entering, undone on leaving."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values
        self._saved: dict[str, Any] | None = None

    def __enter__(self) -> "Settings":
        self._saved = _ferry.get_settings()
        _ferry.set_settings({k: _text(v) for k, v in self._values.items()})
        return settings

    def __exit__(self, *exc: Any) -> None:
        if self._saved is not None:
            _ferry.set_settings({k: _text(v) for k, v in self._saved.items()}, from_defaults=True)


class Settings:
    """The process-wide settings (see the module documentation)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name in _NAMES:
            return _ferry.get_settings()[name]
        raise AttributeError("ferry has no setting %r (known: %s)" % (name, ", ".join(_NAMES)))

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _NAMES:
            raise AttributeError("ferry has no setting %r (known: %s)" % (name, ", ".join(_NAMES)))
        _ferry.set_settings({name: _text(value)})

    def __call__(self, **values: Any) -> _Override:
        """A context manager that applies ``values`` and restores the settings afterwards."""
        for name in values:
            if name not in _NAMES:
                raise AttributeError("ferry has no setting %r" % name)
        return _Override(values)

    def __dir__(self) -> list[str]:
        return sorted(set(_NAMES) | {"update", "as_dict", "resolved", "reset", "names"})

    def __repr__(self) -> str:
        items = ", ".join("%s=%r" % kv for kv in _ferry.get_settings().items())
        errors = "".join("; not used: %s" % e for e in _ferry.settings_errors())
        return "ferry.settings(%s%s)" % (items, errors)

    @property
    def names(self) -> tuple[str, ...]:
        return _NAMES

    def update(self, **values: Any) -> None:
        """Sets several settings at once (all or none: a bad value changes nothing)."""
        _ferry.set_settings({k: _text(v) for k, v in values.items()})

    def as_dict(self) -> dict[str, Any]:
        """The current settings, 0 meaning "derive from this machine"."""
        return _ferry.get_settings()

    def resolved(self) -> dict[str, Any]:
        """The current settings with each derived value filled in."""
        return _ferry.resolved_settings()

    def reset(self) -> None:
        """Back to what the FERRY_* environment variables say (over the defaults); a variable
        that does not parse gives its default, with a warning that names it."""
        for error in _ferry.settings_errors(True):
            warnings.warn("ferry.settings.reset: %s; using the default" % error, stacklevel=2)
        env = _ferry.environment_settings()
        _ferry.set_settings({k: _text(v) for k, v in env.items()}, from_defaults=True)


settings = Settings()
