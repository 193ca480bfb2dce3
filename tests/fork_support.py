"""Running a test's work in a forked child: the child reports what it saw (or what it raised) as JSON.

Shared by the fork tests of the conversation store and of the process-wide tables (tests/test_process_state.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

#: Seconds a forked child has for its work before its alarm ends it (a hung child shows instead of hanging).
CHILD_DEADLINE = 30


def fork(work: Callable[[], dict[str, Any]]) -> tuple[int, int]:
    """Fork: the child runs ``work`` (an alarm ends it after :data:`CHILD_DEADLINE` seconds, so that a hung
    child shows instead of hanging the test), writes what it returned, or what it raised, as JSON to a pipe
    and exits. Returns the child's pid and the pipe's end to read."""
    answer_read, answer_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        report: dict[str, Any] = {}
        try:
            signal.alarm(CHILD_DEADLINE)
            report = work()
        except BaseException:
            report = {"raised": traceback.format_exc()}
        finally:
            os.write(answer_write, json.dumps(report).encode())
            os._exit(0)
    os.close(answer_write)
    return pid, answer_read


def outcome(pid: int, answer_read: int) -> tuple[int, dict[str, Any]]:
    """The child's exit status and its report (empty when it wrote none)."""
    status = wait(pid, CHILD_DEADLINE + 10)
    with os.fdopen(answer_read, "rb") as pipe:
        return status, json.loads(pipe.read() or b"{}")


def wait(pid: int, seconds: float) -> int:
    """The child's exit status; killed (and its status then) when it has not ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]
