"""The control plane through the sync and async clients: list by metadata, connect by id, info,
timeouts, kill, what a killed sandbox's calls raise, pause and resume (asked for, and at the
timeout with lifecycle on_timeout pause)."""

import asyncio
import time
from datetime import datetime, timedelta, timezone

import e2b
import pytest
from conftest import SDK_VERSION, WAIT_S, wait_for
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    NotFoundException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)

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



# Pause and resume: sbx freezes the box in place (memory, processes and files kept) and connect,
# or any use, thaws it. Snapshots (the filesystem saved as an image) are at the end.

# A background process with no command deadline (timeout=0), whose real pid it writes down (by a
# rename, so the file is whole once it exists).
BACKGROUND = "echo $$ > /tmp/bg.pid.new && mv /tmp/bg.pid.new /tmp/bg.pid; exec sleep 3600"


def read_pid(s):
    """The background command's pid, once it wrote it: run() returns when it started, and bash -l
    reads the image's profile files first."""
    wait_for(lambda: s.files.exists("/tmp/bg.pid"), "the background command's pid file")
    return s.files.read("/tmp/bg.pid").strip()


async def read_pid_async(s):
    async def written():
        while not await s.files.exists("/tmp/bg.pid"):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(written(), WAIT_S)
    return (await s.files.read("/tmp/bg.pid")).strip()


def paused_query(run_id):
    return SandboxQuery(metadata={"run": run_id}, state=[SandboxState.PAUSED])


def alive(pid):
    """Shell that prints the process's command line when it still runs."""
    return f"kill -0 {pid} && tr '\\0' ' ' < /proc/{pid}/cmdline"


def test_sync_pause_connect_keeps_files_and_processes_and_kill(run_id):
    s = Sandbox.create(metadata={"run": run_id}, timeout=120)
    try:
        s.commands.run("head -c 65536 /dev/urandom > blob.bin")
        digest = s.commands.run("sha256sum blob.bin").stdout
        bg = s.commands.run(BACKGROUND, background=True, timeout=0)
        pid = read_pid(s)

        paused = s.beta_pause()
        if SDK_VERSION >= (2, 63):
            assert paused is True
            assert s.pause() is False  # already paused: e2b's 409
        assert s.get_info().state == SandboxState.PAUSED
        assert s.is_running() is False
        assert ids(Sandbox.list(query=paused_query(run_id)).next_items()) == [s.sandbox_id]

        again = Sandbox.connect(s.sandbox_id, timeout=60)
        assert again.is_running() is True
        assert s.get_info().state == SandboxState.RUNNING
        assert again.commands.run("sha256sum blob.bin").stdout == digest
        assert again.commands.run(alive(pid)).stdout == "sleep 3600 "
        assert bg.pid in [p.pid for p in again.commands.list()]
        assert Sandbox.list(query=paused_query(run_id)).next_items() == []

        s.beta_pause()
        assert s.get_info().state == SandboxState.PAUSED
        assert s.kill() is True
        with pytest.raises(NotFoundException):
            Sandbox.get_info(s.sandbox_id)
    finally:
        s.kill()


async def test_async_pause_connect_keeps_files_and_processes_and_kill(run_id):
    s = await AsyncSandbox.create(metadata={"run": run_id}, timeout=120)
    try:
        await s.files.write("notes.txt", run_id * 50)
        digest = (await s.commands.run("sha256sum notes.txt")).stdout
        bg = await s.commands.run(BACKGROUND, background=True, timeout=0)
        pid = await read_pid_async(s)

        await s.beta_pause()
        assert (await s.get_info()).state == SandboxState.PAUSED
        assert await s.is_running() is False
        assert ids(await AsyncSandbox.list(query=paused_query(run_id)).next_items()) == [s.sandbox_id]

        again = await AsyncSandbox.connect(s.sandbox_id)
        assert (await s.get_info()).state == SandboxState.RUNNING
        assert (await again.commands.run("sha256sum notes.txt")).stdout == digest
        assert (await again.commands.run(alive(pid))).stdout == "sleep 3600 "
        assert bg.pid in [p.pid for p in await again.commands.list()]

        # Any use resumes a paused sandbox (sbx always auto-resumes), with a timeout again.
        await s.beta_pause()
        assert (await s.commands.run(f"kill -0 {pid} && echo woke")).stdout == "woke\n"
        info = await s.get_info()
        assert info.state == SandboxState.RUNNING
        assert info.end_at - datetime.now(timezone.utc) > timedelta(minutes=4)

        await s.beta_pause()
        assert await s.kill() is True
        assert await AsyncSandbox.kill(s.sandbox_id) is False
    finally:
        await s.kill()


def test_sync_on_timeout_pause(run_id):
    s = Sandbox.create(metadata={"run": run_id}, timeout=120, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        s.files.write("kept.txt", run_id)
        bg = s.commands.run(BACKGROUND, background=True, timeout=0)
        pid = read_pid(s)
        # The timeout passes: the server's cleanup loop pauses the sandbox instead of killing it.
        s.set_timeout(1)
        wait_for(lambda: s.get_info().state == SandboxState.PAUSED, "the timeout to pause the sandbox")
        assert ids(Sandbox.list(query=paused_query(run_id)).next_items()) == [s.sandbox_id]

        Sandbox.connect(s.sandbox_id, timeout=60)
        assert s.get_info().state == SandboxState.RUNNING
        assert s.files.read("kept.txt") == run_id
        assert s.commands.run(alive(pid)).stdout == "sleep 3600 "
        assert bg.pid in [p.pid for p in s.commands.list()]
    finally:
        s.kill()


async def test_async_on_timeout_pause(run_id):
    s = await AsyncSandbox.create(metadata={"run": run_id}, timeout=120, lifecycle={"on_timeout": "pause"})
    try:
        await s.files.write("kept.txt", run_id)
        await s.set_timeout(1)
        deadline = time.monotonic() + WAIT_S
        while (await s.get_info()).state != SandboxState.PAUSED:
            assert time.monotonic() < deadline, f"waited {WAIT_S}s for the timeout to pause the sandbox"
            await asyncio.sleep(0.05)
        await AsyncSandbox.connect(s.sandbox_id)
        assert (await s.files.read("kept.txt")) == run_id
        assert await s.kill() is True
    finally:
        await s.kill()


# Snapshots: create_snapshot saves the sandbox's filesystem (the sandbox keeps running),
# Sandbox.create takes its id (2.63: or its name) as the template, list_snapshots filters by
# sandbox, delete_snapshot answers True, then False. 2.20 sends no name.
NAMED = SDK_VERSION >= (2, 63)
# What a create from a deleted (or unknown) snapshot raises: the template's 404.
GONE_TEMPLATE = "404: template '.*' not found"


def test_sync_snapshot_create_from_it_list_delete(run_id):
    src = Sandbox.create(metadata={"run": run_id}, timeout=120)
    copies = []
    snap = None
    try:
        src.files.write("kept.txt", run_id)
        snap = src.create_snapshot(name=f"{run_id}-snap") if NAMED else src.create_snapshot()
        if NAMED:
            assert snap.names == [f"{run_id}-snap"]
        assert src.get_info().state == SandboxState.RUNNING
        listed = Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        assert [s.snapshot_id for s in src.list_snapshots().next_items()] == [snap.snapshot_id]

        for template in [snap.snapshot_id] + ([f"{run_id}-snap"] if NAMED else []):
            copy = Sandbox.create(template, timeout=120)
            copies.append(copy)
            assert copy.files.read("kept.txt") == run_id
        for copy in copies:
            copy.kill()
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        assert Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items() == []
        with pytest.raises(SandboxException, match=GONE_TEMPLATE):
            Sandbox.create(snap.snapshot_id)
    finally:
        for copy in copies:
            copy.kill()
        if snap is not None:
            Sandbox.delete_snapshot(snap.snapshot_id)
        src.kill()


async def test_async_snapshot_create_from_it_list_delete(run_id):
    src = await AsyncSandbox.create(metadata={"run": run_id}, timeout=120)
    snap = None
    try:
        await src.files.write("kept.txt", run_id)
        snap = await src.create_snapshot()
        assert (await src.get_info()).state == SandboxState.RUNNING
        listed = await AsyncSandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]

        copy = await AsyncSandbox.create(snap.snapshot_id, timeout=120)
        try:
            assert (await copy.files.read("kept.txt")) == run_id
        finally:
            await copy.kill()
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is True
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is False
        with pytest.raises(SandboxException, match=GONE_TEMPLATE):
            await AsyncSandbox.create(snap.snapshot_id)
    finally:
        if snap is not None:
            await AsyncSandbox.delete_snapshot(snap.snapshot_id)
        await src.kill()
