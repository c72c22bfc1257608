"""Shared fixtures of the e2b Python SDK suite. src/server/e2b/python.test.ts runs it against a real
`sbx serve`, with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY in the environment (all the SDK is
given, as unchanged e2b code would be) plus SBX_URL and SBX_PROXY_DOMAIN, which the getHost test
needs to reach the proxy."""

import os
import time
import uuid
from importlib.metadata import version

import pytest
from e2b import AsyncSandbox, Sandbox

SDK_VERSION = tuple(int(p) for p in version("e2b").split(".")[:2])
# Every wait in the suite is for an event; this bounds one that never comes.
WAIT_S = 30


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"e2b {version('e2b')}")


def wait_for(check, what, timeout=WAIT_S):
    """Polls `check` until it returns a truthy value (which it answers), failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout}s for {what}")
        time.sleep(0.05)


@pytest.fixture
def run_id():
    """A value unique to this test, for metadata that finds this test's sandboxes only."""
    return uuid.uuid4().hex


@pytest.fixture(scope="module")
def sandbox():
    """One sandbox for a module's tests that do not end it."""
    sbx = Sandbox.create(metadata={"suite": "python-sync"})
    yield sbx
    sbx.kill()


@pytest.fixture
async def async_sandbox():
    sbx = await AsyncSandbox.create(metadata={"suite": "python-async"})
    yield sbx
    await sbx.kill()


@pytest.fixture
def proxy():
    return {"url": os.environ["SBX_URL"], "domain": os.environ["SBX_PROXY_DOMAIN"], "key": os.environ["E2B_API_KEY"]}
