"""envd 0.6 through the Python SDK, sync and async: file metadata (owner, group, mode, permissions,
symlink targets; 2.63: a write's `metadata`, watch events with their entry), writes that create
their parents as E2B's envd does, a silent remove of a missing path, signed file URLs
(`download_url`/`upload_url`, at the server's root), and a command whose sandbox is killed under it."""

import inspect

import httpx
import pytest
from conftest import wait_for

from e2b.envd import rpc
from e2b import AsyncSandbox, CommandExitException, FileType, Sandbox, SandboxException, TimeoutException


def test_get_info_and_list_carry_owner_group_and_symlink_target(sandbox):
    sandbox.files.write("/home/user/py06/a.txt", "hello")
    sandbox.commands.run("ln -s a.txt /home/user/py06/link", user="root")
    info = sandbox.files.get_info("/home/user/py06/a.txt")
    assert (info.owner, info.group, info.mode, info.permissions, info.size) == ("user", "user", 0o644, "-rw-r--r--", 5)
    assert info.symlink_target is None
    link = sandbox.files.get_info("/home/user/py06/link")
    assert link.type == FileType.FILE
    assert link.symlink_target == "/home/user/py06/a.txt"
    assert link.owner == "root"
    listed = {e.name: e for e in sandbox.files.list("/home/user/py06")}
    assert listed["a.txt"].owner == "user"
    assert listed["link"].symlink_target == "/home/user/py06/a.txt"


def test_write_creates_missing_parents_as_root_handed_to_the_user(sandbox):
    sandbox.files.write("/etc/py-made/deep/f.txt", "deep")
    ls = sandbox.commands.run("ls -ld /etc /etc/py-made /etc/py-made/deep /etc/py-made/deep/f.txt | awk '{print $1, $3}'")
    assert ls.stdout == "drwxr-xr-x root\ndrwxr-xr-x user\ndrwxr-xr-x user\n-rw-r--r-- user\n"


def test_remove_of_a_missing_path_is_silent(sandbox):
    sandbox.files.remove("/home/user/never-was")


def has_file_metadata(sbx):
    return "metadata" in inspect.signature(type(sbx.files).write).parameters


def test_write_metadata_and_watch_entries(sandbox):
    if not has_file_metadata(sandbox):
        pytest.skip("this SDK has no file metadata (envd 0.6.2)")
    written = sandbox.files.write("/home/user/py-tagged.txt", "x", metadata={"Author": "mish"})
    assert written.metadata == {"author": "mish"}
    assert sandbox.files.get_info("/home/user/py-tagged.txt").metadata == {"author": "mish"}
    sandbox.files.make_dir("/home/user/py-watched")
    handle = sandbox.files.watch_dir("/home/user/py-watched", include_entry=True, allow_network_mounts=True)
    try:
        sandbox.files.write("/home/user/py-watched/new.txt", "abc")
        events = []

        def entry_seen():
            events.extend(handle.get_new_events())
            return next((e.entry for e in events if e.name == "new.txt" and e.entry is not None), None)

        entry = wait_for(entry_seen, "a watch event with its entry")
        assert (entry.path, entry.owner, entry.type) == ("/home/user/py-watched/new.txt", "user", FileType.FILE)
    finally:
        handle.stop()


def test_download_and_upload_urls_at_the_server_root(sandbox):
    sandbox.files.write("/home/user/py-shared.txt", "shared")
    url = sandbox.download_url("/home/user/py-shared.txt")
    assert httpx.URL(url).path == "/files"
    got = httpx.get(url)
    assert got.status_code == 200, got.text
    assert got.text == "shared"
    up = sandbox.upload_url("/home/user/py-up/loaded.txt", use_signature_expiration=60)
    res = httpx.post(up, files={"file": ("loaded.txt", b"uploaded")})
    assert res.status_code == 200, res.text
    assert sandbox.files.read("/home/user/py-up/loaded.txt") == "uploaded"
    unsigned = httpx.get(url.split("&signature=")[0])
    assert unsigned.status_code == 401
    assert "missing signature" in unsigned.json()["message"]


# A command whose sandbox is killed: sbx drops the stream's connection, as E2B's proxy does. An SDK
# that probes envd's health after a dropped connection (2.63) finds the sandbox gone and raises
# SandboxNotRunningException ("… killed or reached its end of life …"); an older one (2.20) raises
# the transport error itself, as it would on E2B. Never an exit code.
HEALTH_PROBE = hasattr(rpc, "handle_rpc_exception_with_health")


def assert_killed_under_the_command(err):
    assert not isinstance(err, CommandExitException), err
    if HEALTH_PROBE:
        assert isinstance(err, TimeoutException), repr(err)
        assert "killed or reached its end of life" in str(err)


def test_killed_sandbox_ends_a_running_command_as_not_running():
    sbx = Sandbox.create(metadata={"suite": "python-envd06"})
    handle = sbx.commands.run("sleep 300", background=True)
    wait_for(lambda: any(p.pid == handle.pid for p in sbx.commands.list()), "the command to run")
    sbx.kill()
    with pytest.raises(Exception) as err:
        handle.wait()
    assert_killed_under_the_command(err.value)


async def test_async_metadata_urls_and_a_kill(async_sandbox):
    await async_sandbox.files.write("/home/user/py-async/a.txt", "async")
    info = await async_sandbox.files.get_info("/home/user/py-async")
    assert (info.owner, info.permissions) == ("user", "drwxr-xr-x")
    await async_sandbox.files.remove("/home/user/py-async/none")
    url = async_sandbox.download_url("/home/user/py-async/a.txt")
    async with httpx.AsyncClient() as client:
        assert (await client.get(url)).text == "async"
    sbx = await AsyncSandbox.create(metadata={"suite": "python-envd06-async"})
    handle = await sbx.commands.run("sleep 300", background=True)
    await sbx.kill()
    with pytest.raises(Exception) as err:
        await handle.wait()
    assert_killed_under_the_command(err.value)
