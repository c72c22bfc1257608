"""Egress options through the Python SDK (update_network is 2.63's; 2.20 has none, so the module
is skipped there): allow_out/deny_out and allow_internet_access on create, update_network replacing
the whole config, what sbx does not serve (rules, egress_proxy) refused naming it, a killed
sandbox not found, and real packets to the fake internet (SBX_FAKENET_*: python.test.ts starts it)
following them."""

import os

import pytest
from e2b import Sandbox, SandboxException, SandboxNotFoundException

ALL = "0.0.0.0/0"  # the SDK's ALL_TRAFFIC (not exported by every version)

pytestmark = pytest.mark.skipif(not hasattr(Sandbox, "update_network"), reason="this SDK has no update_network")


@pytest.fixture
def fresh():
    sbx = Sandbox.create(metadata={"suite": "python-network"}, network={"allow_out": ["1.1.1.1"]})
    yield sbx
    sbx.kill()


def test_allow_out_alone_restricts_nothing_and_update_network_clears(fresh):
    info = fresh.get_info()
    assert info.allow_internet_access is True
    assert not (info.network or {}).get("allow_out"), "allowOut without a denied catch-all is e2b's 'everything'"
    fresh.update_network({})
    Sandbox.update_network(fresh.sandbox_id, {"allow_internet_access": True})
    assert fresh.get_info().allow_internet_access is True


def test_allowlist_is_echoed(fresh):
    fresh.update_network({"allow_out": ["PyPI.org"], "deny_out": [ALL]})
    network = fresh.get_info().network
    assert network["allow_out"] == ["pypi.org"]
    assert network["deny_out"] == [ALL]


def reaches(sbx, host):
    """Whether the fake host answers curl from inside the sandbox."""
    r = sbx.commands.run(f'curl -sS -m 4 -o /dev/null http://{host}/; echo "exit=$?"')
    return r.stdout.strip().endswith("exit=0")


def test_real_packets_follow_the_policy():
    ok, name, other = os.environ["SBX_FAKENET_OK"], os.environ["SBX_FAKENET_OK_NAME"], os.environ["SBX_FAKENET_OTHER"]
    sbx = Sandbox.create(metadata={"suite": "python-network"}, network={"allow_out": [ok], "deny_out": [ALL]})
    offline = Sandbox.create(metadata={"suite": "python-network"}, allow_internet_access=False)
    try:
        assert reaches(sbx, ok)
        assert not reaches(sbx, other)
        assert not reaches(offline, ok)
        sbx.update_network({"allow_out": [name], "deny_out": [ALL]})
        assert reaches(sbx, name)
        assert not reaches(sbx, other)
        sbx.update_network({})
        assert reaches(sbx, other), "everything, once the config is cleared"
    finally:
        sbx.kill()
        offline.kill()


def test_what_sbx_does_not_serve_is_refused_naming_it(fresh):
    with pytest.raises(SandboxException, match="rules"):
        fresh.update_network({"allow_out": ["a.test"], "rules": {"a.test": [{"transform": {"headers": {"x": "y"}}}]}})
    with pytest.raises(SandboxException, match="egressProxy"):
        fresh.update_network({"egress_proxy": {"address": "proxy.example.com:1080"}})
    with pytest.raises(SandboxException, match=r"allowOut\[0\]"):
        fresh.update_network({"allow_out": ["bad_name"], "deny_out": [ALL]})


def test_update_network_of_a_killed_sandbox_is_not_found():
    sbx = Sandbox.create(metadata={"suite": "python-network"})
    sbx.kill()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.update_network(sbx.sandbox_id, {})
