"""Timeouts are exact: a sandbox whose timeout set_timeout shortened is gone at its new deadline,
not at the server's next cleanup pass (python.test.ts runs the server with a cleanup interval of
an hour, so only the Manager's deadline timer can end it). The test waits for the sandbox to stop
running, then checks it is gone; it bounds no time, it only checks nothing happened early."""

import time

import pytest
from conftest import wait_for
from e2b import NotFoundException, Sandbox


def test_set_timeout_ends_the_sandbox_at_its_new_deadline():
    sbx = Sandbox.create(timeout=3600, metadata={"suite": "python-timeout"})
    try:
        before = time.time()
        sbx.set_timeout(2)
        assert sbx.is_running() is True
        gone = wait_for(lambda: not sbx.is_running() and time.time(), "the sandbox to end at its new timeout")
        assert gone >= before + 2, f"ended {before + 2 - gone:.3f} s before its deadline"
        # The lag (deadline to seen gone, at most: `before` is before the server's deadline), with pytest -s.
        print(f"set_timeout(2): gone {gone - before - 2:.3f} s after the deadline at most")
        with pytest.raises(NotFoundException):
            sbx.get_info()
    finally:
        sbx.kill()
