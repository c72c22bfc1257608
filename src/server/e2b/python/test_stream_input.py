"""commands.stream_input (e2b 2.63+): envd's client-streaming StreamInput over plain HTTP/1.1. Input
arrives in order, the process is found by pid, an unknown pid is NotFoundException; the async SDK's
long-lived input handle (send, then close) takes the same path."""

import pytest
from e2b.exceptions import NotFoundException


def _has_stream_input(sbx):
    if not hasattr(sbx.commands, "stream_input"):
        pytest.skip("this SDK has no commands.stream_input")


def test_stream_input_sends_chunks_in_order(sandbox):
    _has_stream_input(sandbox)
    h = sandbox.commands.run("head -n 3", background=True, stdin=True)
    sandbox.commands.stream_input(h.pid, (f"line {i}\n" for i in range(3)))
    assert h.wait().stdout == "line 0\nline 1\nline 2\n"


def test_stream_input_takes_bytes(sandbox):
    _has_stream_input(sandbox)
    h = sandbox.commands.run("wc -c", background=True, stdin=True)
    sandbox.commands.stream_input(h.pid, [b"\x00\x01\x02", b"abc"])
    sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout.strip() == "6"


def test_stream_input_to_an_unknown_pid_is_not_found(sandbox):
    _has_stream_input(sandbox)
    with pytest.raises(NotFoundException):
        sandbox.commands.stream_input(999999, ["x"])


async def test_async_input_handle_sends_then_closes(async_sandbox):
    _has_stream_input(async_sandbox)
    h = await async_sandbox.commands.run("cat", background=True, stdin=True)
    handle = async_sandbox.commands.stream_input(h.pid)
    for part in ("one ", "two ", "three"):
        await handle.send(part)
    await handle.close()
    await async_sandbox.commands.close_stdin(h.pid)
    assert (await h.wait()).stdout == "one two three"
