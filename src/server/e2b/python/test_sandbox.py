"""The control plane through the sync and async clients: list by metadata, connect by id, info,
timeouts, kill, and what a killed sandbox's calls raise."""

from datetime import datetime, timedelta, timezone

import e2b
import pytest
from conftest import SDK_VERSION
from e2b import AsyncSandbox, AuthenticationException, NotFoundException, Sandbox, SandboxQuery, TimeoutException

# What a call on a killed sandbox raises: SandboxNotRunningException where the SDK has it (it
# reads envd's "was not found" answer), before that the TimeoutException it is a subclass of.
GONE = getattr(e2b, "SandboxNotRunningException", TimeoutException)


def ids(items):
    return sorted(s.sandbox_id for s in items)


def test_sync_lifecycle(run_id):
    a = Sandbox.create(metadata={"run": run_id, "role": "a"}, timeout=120, envs={"FROM_CREATE": "yes"})
    b = Sandbox.create(metadata={"run": run_id, "role": "b"})
    try:
        assert a.is_running() is True
        assert a.commands.run('echo "$FROM_CREATE"').stdout == "yes\n"
        # Pages of one: the second page is the other sandbox, then there is no next.
        pages = Sandbox.list(query=SandboxQuery(metadata={"run": run_id}), limit=1)
        first = pages.next_items()
        assert pages.has_next
        second = pages.next_items()
        assert ids(first + second) == sorted([a.sandbox_id, b.sandbox_id])
        assert len(first) == 1 and not pages.has_next

        found = Sandbox.list(query=SandboxQuery(metadata={"run": run_id})).next_items()
        assert ids(found) == sorted([a.sandbox_id, b.sandbox_id])
        only_a = Sandbox.list(query=SandboxQuery(metadata={"run": run_id, "role": "a"})).next_items()
        assert ids(only_a) == [a.sandbox_id]
        assert only_a[0].metadata == {"run": run_id, "role": "a"}
        assert only_a[0].template_id == "base"

        info = a.get_info()
        assert info.sandbox_id == a.sandbox_id
        assert info.metadata == {"run": run_id, "role": "a"}
        assert info.state == "running"
        assert info.cpu_count >= 1
        # timeout=120 at create: the end is about two minutes after the start.
        assert timedelta(seconds=110) < info.end_at - info.started_at <= timedelta(seconds=121)

        a.set_timeout(3600)
        later = a.get_info().end_at
        assert later - datetime.now(timezone.utc) > timedelta(minutes=55)

        # Another client that knows only the id.
        again = Sandbox.connect(a.sandbox_id)
        assert again.commands.run("echo connected").stdout == "connected\n"
        assert Sandbox.get_info(a.sandbox_id).sandbox_id == a.sandbox_id

        assert b.kill() is True
        assert b.is_running() is False
        with pytest.raises(GONE):
            b.commands.run("true")
        with pytest.raises(GONE):
            b.files.read("/etc/hostname")
        with pytest.raises(NotFoundException):
            b.get_info()
        assert Sandbox.kill(b.sandbox_id) is False
        assert ids(Sandbox.list(query=SandboxQuery(metadata={"run": run_id})).next_items()) == [a.sandbox_id]
    finally:
        a.kill()
        b.kill()


async def test_async_lifecycle(run_id):
    a = await AsyncSandbox.create(metadata={"run": run_id}, timeout=120)
    try:
        found = await AsyncSandbox.list(query=SandboxQuery(metadata={"run": run_id})).next_items()
        assert ids(found) == [a.sandbox_id]
        info = await a.get_info()
        assert info.metadata == {"run": run_id}
        await a.set_timeout(3600)
        assert (await a.get_info()).end_at - datetime.now(timezone.utc) > timedelta(minutes=55)

        again = await AsyncSandbox.connect(a.sandbox_id)
        assert (await again.commands.run("echo connected")).stdout == "connected\n"

        assert await a.kill() is True
        assert await a.is_running() is False
        with pytest.raises(GONE):
            await a.commands.run("true")
        with pytest.raises(GONE):
            await a.files.write("x.txt", "x")
        with pytest.raises(NotFoundException):
            await AsyncSandbox.get_info(a.sandbox_id)
        assert await AsyncSandbox.kill(a.sandbox_id) is False
    finally:
        await a.kill()


def test_a_wrong_key_and_an_unknown_sandbox():
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_" + "0" * 80)
    with pytest.raises(NotFoundException):
        Sandbox.connect("sb-000000000000")
    assert Sandbox.kill("sb-000000000000") is False


# Pause, resume and snapshots (`beta_pause`/`pause`, `resume`, `lifecycle={"on_timeout": "pause"}`,
# `create_snapshot`) belong here once sbx serves e2b's pause endpoints; today they answer 501.
