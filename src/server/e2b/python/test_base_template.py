"""The `base` template's tools through the sync client, as e2b code calls them: bash, git as `user`,
python3, curl against a server in the sandbox, passwordless sudo, tput (images/sbx-e2b)."""

from conftest import WAIT_S, wait_for


def test_bash_and_the_user(sandbox):
    r = sandbox.commands.run("bash --version; id -un; id -u; pwd")
    assert r.stdout.startswith("GNU bash, version 5.")
    assert r.stdout.endswith("user\n1000\n/home/user\n")


def test_sudo_without_a_password(sandbox):
    assert sandbox.commands.run("sudo -n true && sudo -n id -u").stdout == "0\n"


def test_git_init_and_commit(sandbox):
    # E2B's base presets no git identity: e2b code sets one, as here.
    r = sandbox.commands.run(
        "set -e; rm -rf ~/py-repo && git init -q -b main ~/py-repo && cd ~/py-repo"
        ' && git config user.name "Py User" && git config user.email py@example.com'
        ' && echo hi > a.txt && git add a.txt && git commit -q -m "from python"'
        ' && git log --format="%an %s"'
    )
    assert r.stdout == "Py User from python\n"


def test_python3(sandbox):
    assert sandbox.commands.run("python3 -c 'import sys; print(sys.version_info[0] * 7)'").stdout == "21\n"
    assert sandbox.commands.run("python -c 'import sys; print(sys.version_info[0])'").stdout == "3\n"
    assert sandbox.commands.run("pip --version").stdout.startswith("pip ")


def test_curl_against_a_server_in_the_sandbox(sandbox):
    sandbox.commands.run("mkdir -p /tmp/pywww && echo from-python-test > /tmp/pywww/index.txt")
    server = sandbox.commands.run(
        "exec python3 -m http.server 18124 --bind 127.0.0.1 --directory /tmp/pywww", background=True
    )
    try:
        # The sync handle reads no output until waited on: curl until the server answers.
        got = wait_for(
            lambda: sandbox.commands.run("curl -sS --fail http://127.0.0.1:18124/index.txt 2>/dev/null || true").stdout,
            "the HTTP server in the sandbox",
            WAIT_S,
        )
        assert got == "from-python-test\n"
        assert sandbox.commands.run("curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:18124/nope").stdout == "404"
    finally:
        server.kill()


def test_tput_with_a_term(sandbox):
    r = sandbox.commands.run("tput colors; tput cols", envs={"TERM": "xterm-256color", "COLUMNS": "100"})
    assert r.stdout == "256\n100\n"
