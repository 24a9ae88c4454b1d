"""Logging: what cudnn-py and cuDNN itself report goes through Python's ``logging``.

Every message is under the ``cudnn`` logger: ``cudnn.libcudnn`` (cuDNN's own log, routed
through its callback API), ``cudnn.build``, ``cudnn.execute``, ``cudnn.plan_cache``, ... Nothing
is printed by default except warnings (Python's last-resort handler shows WARNING and above
when the program configured no logging).

The official frontend's switches work too: with ``CUDNN_FRONTEND_LOG_INFO=1`` and
``CUDNN_FRONTEND_LOG_FILE`` (a path, ``stdout`` or ``stderr``) set when ``cudnn`` is imported,
the ``cudnn`` loggers' INFO records go there as bare lines, and so does each graph's JSON, on
one line when it is validated (a DEBUG record of ``cudnn.graph``, let through to that file).

cuDNN's log is switched at run time with :func:`set_log_level`: cudnn-py registers a callback
with ``cudnnSetCallback`` and a severity mask matching the level, so there is no need to set
``CUDNN_LOGLEVEL_DBG`` / ``CUDNN_LOGDEST_DBG`` before the library loads (cuDNN calls a
registered callback whatever those variables say). Called before libcudnn is loaded, the
callback is registered as soon as it is.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
from typing import Any

__all__ = ["LIBCUDNN_LOGGER", "LOGGER", "OFF", "get_logger", "set_log_level"]

LOGGER = "cudnn"
LIBCUDNN_LOGGER = "cudnn.libcudnn"
OFF = logging.CRITICAL + 10  # above every level: nothing is logged

_NAMES = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL, "FATAL": logging.CRITICAL, "OFF": OFF}
# cudnnSeverity_t -> logging level: FATAL, ERROR, WARNING, INFO.
SEVERITY_LEVELS = {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}

_lock = threading.Lock()
_state: dict[str, Any] = {"mask": 0, "callback": None, "pending": False, "exiting": False}


def get_logger(name: str = "") -> logging.Logger:
    """The ``cudnn`` logger, or its child ``cudnn.<name>`` (``get_logger("build")``)."""
    return logging.getLogger(f"{LOGGER}.{name}" if name else LOGGER)


def frontend_log_from_environment(environ: Any = None) -> logging.Handler | None:
    """Honour the official frontend's ``CUDNN_FRONTEND_LOG_INFO`` / ``CUDNN_FRONTEND_LOG_FILE``:
    the handler added to the ``cudnn`` logger (INFO, bare messages), or None where logging is
    off (the info switch unset or 0, or no destination, as in the official)."""
    import os

    env = os.environ if environ is None else environ
    if env.get("CUDNN_FRONTEND_LOG_INFO", "0").strip() in ("", "0"):
        return None
    dest = env.get("CUDNN_FRONTEND_LOG_FILE", "").strip()
    if not dest:
        return None
    handler: logging.Handler
    if dest in ("stdout", "stderr"):
        handler = logging.StreamHandler(sys.stdout if dest == "stdout" else sys.stderr)
    else:
        handler = logging.FileHandler(dest, mode="w", delay=True)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(_frontend_records)
    logger = get_logger()
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    graph = get_logger("graph")
    if graph.getEffectiveLevel() > logging.DEBUG:
        graph.setLevel(logging.DEBUG)  # the graph's JSON is a DEBUG record
    return handler


def _frontend_records(record: logging.LogRecord) -> bool:
    """What the official frontend's log file gets: INFO and above, and the graphs' JSON."""
    return record.levelno >= logging.INFO or getattr(record, "graph_json", False)


def _as_level(level: int | str | None) -> int:
    if level is None:
        return OFF
    if isinstance(level, bool) or not isinstance(level, (int, str)):
        raise TypeError(f"set_log_level: level must be a logging level (int) or one of {sorted(_NAMES)}, "
                        f"got {type(level).__name__}")
    if isinstance(level, str):
        try:
            return _NAMES[level.strip().upper()]
        except KeyError:
            raise ValueError(f"set_log_level: unknown level {level!r}; expected one of {sorted(_NAMES)} "
                             "or a logging level number") from None
    if level < 0:
        raise ValueError(f"set_log_level: a logging level is >= 0, got {level}")
    return level


def severity_mask(level: int) -> int:
    """The cudnnSetCallback mask that lets through cuDNN's messages at ``level`` and above."""
    from ._lib.capi import SEV_ERROR_EN, SEV_FATAL_EN, SEV_INFO_EN, SEV_WARNING_EN

    mask = SEV_FATAL_EN | SEV_ERROR_EN  # the least cuDNN accepts (it turns 0 into its error mask)
    for bit, lowest in ((SEV_FATAL_EN, logging.CRITICAL), (SEV_ERROR_EN, logging.ERROR),
                        (SEV_WARNING_EN, logging.WARNING), (SEV_INFO_EN, logging.INFO)):
        if level <= lowest:
            mask |= bit
    return mask


def set_log_level(level: int | str | None) -> None:
    """Set the level of the ``cudnn`` loggers and route cuDNN's own log there from that level up.

    ``level``: a ``logging`` level or its name (``"DEBUG"``, ``"INFO"``, ``"WARNING"``,
    ``"ERROR"``, ``"CRITICAL"``), or ``"OFF"`` / None to silence the ``cudnn`` loggers.
    cuDNN's severities map to CRITICAL, ERROR, WARNING and INFO records of the
    ``cudnn.libcudnn`` logger (its INFO log is a record per API call, which is slow: use it to
    debug). Takes effect at once, also after libcudnn is loaded; before, the callback is
    registered when the library loads. Once registered the callback stays: cuDNN keeps
    sending at least its errors (``cudnnSetCallback`` turns a zero mask into the error mask,
    and handing the log back to cuDNN prints them to stderr), and the logger's level drops
    them. When neither the ``cudnn`` logger nor the root logger has a handler, a stderr
    handler is added to ``cudnn`` so the asked-for messages show.
    """
    value = _as_level(level)
    logger = get_logger()
    logger.setLevel(value)
    if value < OFF and not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    from ._lib import loader

    with _lock:
        _state["mask"] = severity_mask(value)
        if _state["pending"]:
            return
        _state["pending"] = True
    loader.on_load(_apply)  # now when libcudnn is loaded, else right after it loads


def _apply() -> None:
    """Register (or remove) the callback with the current mask; runs with libcudnn loaded."""
    from ._lib import capi

    with _lock:
        _state["pending"] = False
        mask = _state["mask"]
        if _state["callback"] is None:
            if get_logger().getEffectiveLevel() >= OFF:
                return  # never registered and nothing wanted: cuDNN's own settings stay
            _state["callback"] = capi.LOG_CALLBACK(_on_message)  # cuDNN keeps the pointer: so do we
            atexit.register(_at_exit)
        callback = _state["callback"]
    try:
        status = capi.set_log_callback(mask, callback)
    except Exception as exc:  # noqa: BLE001 - an old or odd libcudnn: logging must not break loading
        get_logger("load").warning("cannot route cuDNN's log to Python: cudnnSetCallback failed (%s)", exc)
        return
    if status:
        get_logger("load").warning("cannot route cuDNN's log to Python: cudnnSetCallback returned %d", status)


def _at_exit() -> None:
    """At exit: cuDNN's fewest messages, and none passed on (the interpreter is going away).
    The callback is not unregistered: cuDNN's default sink would print errors to stderr."""
    from ._lib import capi

    _state["exiting"] = True
    try:
        capi.set_log_callback(severity_mask(OFF), _state["callback"])
    except Exception:  # noqa: BLE001 - at exit, the library may already be unusable
        pass


def _on_message(severity: int, _udata: Any, _dbg: Any, message: int | None) -> None:
    """The C callback: one cuDNN message -> one record of ``cudnn.libcudnn``. Never raises."""
    if _state["exiting"]:
        return
    try:
        level = SEVERITY_LEVELS.get(severity, logging.INFO)
        logger = logging.getLogger(LIBCUDNN_LOGGER)
        if not logger.isEnabledFor(level):
            return
        from ._lib.capi import message_lines

        lines = message_lines(message or 0)
        logger.log(level, "\n".join(lines), extra={"cudnn_severity": severity})
    except Exception:  # noqa: BLE001 - an exception cannot cross the C frame; a lost log line is the lesser harm
        pass
