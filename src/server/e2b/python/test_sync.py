"""The sync client (`e2b.Sandbox`) on one sandbox: commands, PTY, files, watch, getHost."""

import httpcore
import httpx
import pytest
from conftest import WAIT_S, wait_for
import io

from e2b import CommandExitException, FilesystemEventType, FileType, NotFoundException, PtySize, TimeoutException


def test_run_as_the_default_user(sandbox):
    r = sandbox.commands.run('echo "hello from $(whoami)"')
    assert r.exit_code == 0
    assert r.stdout == "hello from user\n"
    assert r.stderr == ""


def test_run_with_env_and_cwd(sandbox):
    r = sandbox.commands.run('echo "$GREETING"; pwd', envs={"GREETING": "hi there"}, cwd="/tmp")
    assert r.stdout == "hi there\n/tmp\n"


def test_run_as_root(sandbox):
    assert sandbox.commands.run("whoami", user="root").stdout == "root\n"


def test_command_timeout_raises_timeout_exception_and_kills_it(sandbox):
    # As in test_async: the SDK's own read timeout of the same second may fire before sbx's
    # deadline_exceeded arrives; either way the command must be killed.
    with pytest.raises((TimeoutException, httpcore.ReadTimeout, httpx.ReadTimeout)):
        sandbox.commands.run("sleep 601", timeout=1)
    # As in e2b's envd, the timeout ends the command, not just the wait for it.
    wait_for(
        lambda: not any("sleep 601" in " ".join(p.args) for p in sandbox.commands.list()),
        "the timed-out command to end",
    )


def test_nonzero_exit_raises_command_exit_exception(sandbox):
    with pytest.raises(CommandExitException) as e:
        sandbox.commands.run("echo out; echo err >&2; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stdout == "out\n"
    assert e.value.stderr == "err\n"


def test_streaming_output_callbacks(sandbox):
    out, err = [], []
    r = sandbox.commands.run(
        "for i in 1 2 3; do echo o$i; echo e$i >&2; done",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert "".join(out) == "o1\no2\no3\n" == r.stdout
    assert "".join(err) == "e1\ne2\ne3\n" == r.stderr


def test_background_command_list_connect_kill(sandbox):
    h = sandbox.commands.run("sleep 600", background=True)
    assert h.pid in [p.pid for p in sandbox.commands.list()]
    # A second handle on the same process, as another client would get it.
    other = sandbox.commands.connect(h.pid)
    assert sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
    with pytest.raises(CommandExitException):
        other.wait()
    wait_for(lambda: h.pid not in [p.pid for p in sandbox.commands.list()], "the killed command to leave the list")
    assert sandbox.commands.kill(h.pid) is False


def test_send_stdin(sandbox):
    h = sandbox.commands.run("head -n 1", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "a line of input\n")
    assert h.wait().stdout == "a line of input\n"


def test_close_stdin_where_the_sdk_has_it(sandbox):
    if not hasattr(sandbox.commands, "close_stdin"):
        pytest.skip("this SDK has no commands.close_stdin")
    h = sandbox.commands.run("wc -c", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "12345")
    sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout.strip() == "5"


def test_pty_create_input_resize_exit(sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.resize(h.pid, PtySize(rows=30, cols=100))
    sandbox.pty.send_stdin(h.pid, b"stty size; exit 7\n")
    data = []
    with pytest.raises(CommandExitException) as e:
        h.wait(on_pty=data.append)
    assert e.value.exit_code == 7
    assert "30 100" in b"".join(data).decode()


def test_pty_kill(sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80))
    assert sandbox.pty.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()


def test_files_text_bytes_and_entries(sandbox):
    info = sandbox.files.write("sync/notes.txt", "some text\n")
    assert info.path == "/home/user/sync/notes.txt"
    assert sandbox.files.read("sync/notes.txt") == "some text\n"
    blob = bytes(range(256))
    sandbox.files.write("/home/user/sync/blob.bin", blob)
    assert bytes(sandbox.files.read("sync/blob.bin", format="bytes")) == blob

    assert sandbox.files.exists("sync/notes.txt") is True
    assert sandbox.files.exists("sync/absent.txt") is False
    assert sandbox.files.make_dir("sync/sub") is True
    assert sandbox.files.make_dir("sync/sub") is False
    names = sorted(e.name for e in sandbox.files.list("sync"))
    assert names == ["blob.bin", "notes.txt", "sub"]

    entry = sandbox.files.get_info("sync/blob.bin")
    assert entry.name == "blob.bin"
    assert entry.type == FileType.FILE
    assert entry.size == 256
    assert sandbox.files.get_info("sync/sub").type == FileType.DIR

    moved = sandbox.files.rename("sync/notes.txt", "sync/sub/moved.txt")
    assert moved.path == "/home/user/sync/sub/moved.txt"
    assert sandbox.files.read("sync/sub/moved.txt") == "some text\n"
    sandbox.files.remove("sync/sub")
    assert sandbox.files.exists("sync/sub") is False


def test_read_a_missing_file_raises_not_found(sandbox):
    with pytest.raises(NotFoundException):
        sandbox.files.read("no/such/file.txt")


def test_write_a_file_object_and_read_a_stream(sandbox):
    sandbox.files.write("stream/data.bin", io.BytesIO(b"x" * 100_000))
    assert b"".join(sandbox.files.read("stream/data.bin", format="stream")) == b"x" * 100_000


def test_write_many_files(sandbox):
    written = sandbox.files.write_files(
        [{"path": "many/a.txt", "data": "A"}, {"path": "/home/user/many/b.bin", "data": b"\x00B"}]
    )
    assert sorted(w.path for w in written) == ["/home/user/many/a.txt", "/home/user/many/b.bin"]
    assert sandbox.files.read("many/a.txt") == "A"
    assert bytes(sandbox.files.read("many/b.bin", format="bytes")) == b"\x00B"


def test_watch_dir_sees_a_created_file(sandbox):
    sandbox.files.make_dir("watched")
    w = sandbox.files.watch_dir("watched")
    try:
        sandbox.files.write("watched/new.txt", "x")
        seen = []

        def created():
            seen.extend(w.get_new_events())
            return any(e.name == "new.txt" and e.type in (FilesystemEventType.CREATE, FilesystemEventType.WRITE) for e in seen)

        wait_for(created, "a watch event for watched/new.txt")
    finally:
        w.stop()


def test_get_host_reaches_a_service_started_in_the_box(sandbox, proxy):
    host = sandbox.get_host(8080)
    assert host == f"8080-{sandbox.sandbox_id}.{proxy['domain']}"
    sandbox.commands.run("mkdir -p /tmp/www && echo served-by-box > /tmp/www/index.html")
    sandbox.commands.run("python3 -m http.server 8080 --directory /tmp/www", background=True)
    port = proxy["url"].rsplit(":", 1)[1]

    def page():
        # The proxy answers 502 until the server listens.
        r = httpx.get(f"{proxy['url']}/index.html", headers={"host": f"{host}:{port}", "authorization": f"Bearer {proxy['key']}"}, timeout=WAIT_S)
        return r if r.status_code == 200 else None

    assert wait_for(page, "the HTTP server behind getHost(8080)").text == "served-by-box\n"
    anonymous = httpx.get(f"{proxy['url']}/index.html", headers={"host": f"{host}:{port}"}, timeout=WAIT_S)
    assert anonymous.status_code == 403  # no credential: e2b's 403
