"""The async client (`e2b.AsyncSandbox`): commands, PTY, files, watch, getHost."""

import asyncio

import httpcore
import httpx
import pytest
from conftest import WAIT_S
from e2b import CommandExitException, FilesystemEventType, FileType, PtySize, TimeoutException


async def test_run_env_cwd_and_exit_codes(async_sandbox):
    r = await async_sandbox.commands.run('echo "hello from $(whoami)"')
    assert r.stdout == "hello from user\n"
    r = await async_sandbox.commands.run('echo "$GREETING"; pwd', envs={"GREETING": "hi there"}, cwd="/tmp")
    assert r.stdout == "hi there\n/tmp\n"
    with pytest.raises(CommandExitException) as e:
        await async_sandbox.commands.run("echo out; echo err >&2; exit 3")
    assert (e.value.exit_code, e.value.stdout, e.value.stderr) == (3, "out\n", "err\n")


async def test_command_timeout_raises_timeout_exception_and_kills_it(async_sandbox):
    # sbx ends the stream deadline_exceeded (TimeoutException) at the deadline; the SDK's own read
    # timeout is the same second, started earlier, and may fire first: 2.20's async client raises
    # that one as httpcore.ReadTimeout (seen in CI). Either way the command must be killed.
    with pytest.raises((TimeoutException, httpcore.ReadTimeout, httpx.ReadTimeout)):
        await async_sandbox.commands.run("sleep 603", timeout=1)

    async def ended():
        while any("sleep 603" in " ".join(p.args) for p in await async_sandbox.commands.list()):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(ended(), WAIT_S)


async def test_streaming_output_callbacks(async_sandbox):
    out, err = [], []
    r = await async_sandbox.commands.run(
        "for i in 1 2 3; do echo o$i; echo e$i >&2; done", on_stdout=out.append, on_stderr=err.append
    )
    assert "".join(out) == "o1\no2\no3\n" == r.stdout
    assert "".join(err) == "e1\ne2\ne3\n" == r.stderr


async def test_background_command_output_list_connect_kill(async_sandbox):
    started = asyncio.Event()

    def on_stdout(chunk):
        if "ready" in chunk:
            started.set()

    h = await async_sandbox.commands.run("echo ready; sleep 600", background=True, on_stdout=on_stdout)
    await asyncio.wait_for(started.wait(), WAIT_S)
    assert h.pid in [p.pid for p in await async_sandbox.commands.list()]
    other = await async_sandbox.commands.connect(h.pid)
    assert await async_sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        await h.wait()
    with pytest.raises(CommandExitException):
        await other.wait()
    assert await async_sandbox.commands.kill(h.pid) is False


async def test_send_stdin(async_sandbox):
    h = await async_sandbox.commands.run("head -n 1", background=True, stdin=True)
    await async_sandbox.commands.send_stdin(h.pid, "a line of input\n")
    assert (await h.wait()).stdout == "a line of input\n"


async def test_pty_create_input_resize_exit_and_kill(async_sandbox):
    data = []
    h = await async_sandbox.pty.create(PtySize(rows=24, cols=80), on_data=data.append)
    await async_sandbox.pty.resize(h.pid, PtySize(rows=30, cols=100))
    await async_sandbox.pty.send_stdin(h.pid, b"stty size; exit 7\n")
    with pytest.raises(CommandExitException) as e:
        await h.wait()
    assert e.value.exit_code == 7
    assert "30 100" in b"".join(data).decode()

    h = await async_sandbox.pty.create(PtySize(rows=24, cols=80), on_data=lambda _: None)
    assert await async_sandbox.pty.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        await h.wait()


async def test_files(async_sandbox):
    files = async_sandbox.files
    await files.write("async/notes.txt", "some text\n")
    assert await files.read("async/notes.txt") == "some text\n"
    blob = bytes(range(256))
    await files.write("async/blob.bin", blob)
    assert bytes(await files.read("async/blob.bin", format="bytes")) == blob
    assert await files.exists("async/notes.txt") is True
    assert await files.exists("async/absent.txt") is False
    assert await files.make_dir("async/sub") is True
    assert await files.make_dir("async/sub") is False
    assert sorted(e.name for e in await files.list("async")) == ["blob.bin", "notes.txt", "sub"]
    entry = await files.get_info("async/blob.bin")
    assert (entry.name, entry.type, entry.size) == ("blob.bin", FileType.FILE, 256)
    await files.rename("async/notes.txt", "async/sub/moved.txt")
    assert await files.read("async/sub/moved.txt") == "some text\n"
    await files.remove("async/sub")
    assert await files.exists("async/sub") is False
    written = await files.write_files([{"path": "many/a.txt", "data": "A"}, {"path": "many/b.txt", "data": b"B"}])
    assert sorted(w.name for w in written) == ["a.txt", "b.txt"]


async def test_watch_dir_sees_a_created_file(async_sandbox):
    await async_sandbox.files.make_dir("watched/deeper")
    seen = asyncio.Event()

    def on_event(e):
        if e.name.endswith("new.txt") and e.type in (FilesystemEventType.CREATE, FilesystemEventType.WRITE):
            seen.set()

    # Recursive: the file lands in a subdirectory.
    w = await async_sandbox.files.watch_dir("watched", on_event=on_event, recursive=True)
    try:
        await async_sandbox.files.write("watched/deeper/new.txt", "x")
        await asyncio.wait_for(seen.wait(), WAIT_S)
    finally:
        await w.stop()


async def test_get_host_reaches_a_service_started_in_the_box(async_sandbox, proxy):
    host = async_sandbox.get_host(8081)
    assert host == f"8081-{async_sandbox.sandbox_id}.{proxy['domain']}"
    await async_sandbox.commands.run("mkdir -p /tmp/www && echo async-served > /tmp/www/index.html")
    await async_sandbox.commands.run("python3 -m http.server 8081 --directory /tmp/www", background=True)
    port = proxy["url"].rsplit(":", 1)[1]
    headers = {"host": f"{host}:{port}", "authorization": f"Bearer {proxy['key']}"}
    async with httpx.AsyncClient(timeout=WAIT_S) as client:

        async def page():
            # The proxy answers 502 until the server listens.
            while (r := await client.get(f"{proxy['url']}/index.html", headers=headers)).status_code != 200:
                await asyncio.sleep(0.05)
            return r

        assert (await asyncio.wait_for(page(), WAIT_S)).text == "async-served\n"
