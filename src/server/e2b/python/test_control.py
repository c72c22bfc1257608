"""The control plane's newer parts through the sync and async clients: get_metrics (samples of the
engine's stats, a window in seconds), the traffic access token of a sandbox's ports
(network allow_public_traffic False, and sbx's default: every sandbox has one), and mcp without
an mcp-gateway template (e2b's 404 for an unknown template). Fork: neither SDK version tested
here has it (the npm SDK's test covers it)."""

from datetime import datetime, timedelta, timezone

import httpx
import pytest
from conftest import WAIT_S, wait_for
from e2b import AsyncSandbox, Sandbox, SandboxException

TOKEN_HEADER = "e2b-traffic-access-token"


def check_metric(m):
    assert m.cpu_count >= 1
    assert m.cpu_used_pct >= 0
    assert 0 < m.mem_used <= m.mem_total
    assert m.disk_used >= 0 and m.disk_total == 0
    if hasattr(m, "mem_cache"):  # 2.63 requires it
        assert m.mem_cache >= 0
    assert abs((m.timestamp - datetime.now(timezone.utc)).total_seconds()) < 60


def test_sync_get_metrics(sandbox):
    metrics = sandbox.get_metrics()
    assert len(metrics) >= 1, "a sample right after create"
    check_metric(metrics[0])
    assert Sandbox.get_metrics(sandbox.sandbox_id)[0].timestamp == metrics[0].timestamp
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert sandbox.get_metrics(start=future) == []
    assert sandbox.get_metrics(end=metrics[0].timestamp - timedelta(hours=1)) == []


async def test_async_get_metrics(async_sandbox):
    metrics = await async_sandbox.get_metrics()
    assert len(metrics) >= 1
    check_metric(metrics[0])
    assert (await AsyncSandbox.get_metrics(async_sandbox.sandbox_id))[0].timestamp == metrics[0].timestamp


def test_traffic_access_token_guards_the_ports(proxy):
    sbx = Sandbox.create(network={"allow_public_traffic": False})
    try:
        token = sbx.traffic_access_token
        assert isinstance(token, str) and token
        # sbx's default (server.e2b.publicTraffic unset): a sandbox that did not refuse public traffic has one too.
        plain = Sandbox.create()
        try:
            assert isinstance(plain.traffic_access_token, str) and plain.traffic_access_token != token
        finally:
            plain.kill()
        host = sbx.get_host(8080)
        sbx.commands.run("mkdir -p /tmp/www && echo behind-the-token > /tmp/www/index.html")
        sbx.commands.run("exec python3 -m http.server 8080 --directory /tmp/www", background=True)
        port = proxy["url"].rsplit(":", 1)[1]

        def page():
            r = httpx.get(f"{proxy['url']}/index.html", headers={"host": f"{host}:{port}", TOKEN_HEADER: token}, timeout=WAIT_S)
            return r if r.status_code == 200 else None

        assert wait_for(page, "httpd behind the traffic token").text == "behind-the-token\n"
        assert httpx.get(f"{proxy['url']}/index.html", headers={"host": f"{host}:{port}"}, timeout=WAIT_S).status_code == 403  # no credential: e2b's 403
        wrong = httpx.get(f"{proxy['url']}/index.html", headers={"host": f"{host}:{port}", TOKEN_HEADER: "x" * 43}, timeout=WAIT_S)
        assert wrong.status_code == 401
        assert Sandbox.connect(sbx.sandbox_id).traffic_access_token == token
    finally:
        sbx.kill()


def test_mcp_without_a_gateway_template_is_an_unknown_template():
    with pytest.raises(SandboxException) as err:
        Sandbox.create(mcp={"exa": {"apiKey": "k"}})
    assert "template 'mcp-gateway' not found" in str(err.value)


async def test_async_mcp_without_a_gateway_template():
    with pytest.raises(SandboxException) as err:
        await AsyncSandbox.create(mcp={"exa": {"apiKey": "k"}})
    assert "mcp-gateway" in str(err.value)


@pytest.mark.skipif(not hasattr(Sandbox, "fork"), reason="this SDK version has no fork (2.63 has)")
def test_sync_fork(sandbox):
    sandbox.files.write("/home/user/forked.txt", "before the fork")
    forks = sandbox.fork(timeout=60, count=2)
    try:
        assert len(forks) == 2
        for f in forks:
            assert isinstance(f, Sandbox), f
            assert f.sandbox_id != sandbox.sandbox_id
            assert f.files.read("/home/user/forked.txt") == "before the fork"
            assert f.get_info().metadata == sandbox.get_info().metadata
        assert sandbox.is_running()
    finally:
        for f in forks:
            if isinstance(f, Sandbox):
                f.kill()
    # The copy is a snapshot of the source: deletable once its forks are gone.
    for s in Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id).next_items():
        assert Sandbox.delete_snapshot(s.snapshot_id) is True


@pytest.mark.skipif(not hasattr(AsyncSandbox, "fork"), reason="this SDK version has no fork (2.63 has)")
async def test_async_fork(async_sandbox):
    (fork,) = await AsyncSandbox.fork(async_sandbox.sandbox_id, count=1)
    try:
        assert isinstance(fork, AsyncSandbox), fork
        assert (await fork.commands.run("echo forked")).stdout == "forked\n"
    finally:
        await fork.kill()
    for s in await AsyncSandbox.list_snapshots(sandbox_id=async_sandbox.sandbox_id).next_items():
        assert await AsyncSandbox.delete_snapshot(s.snapshot_id) is True
