"""A real OpenID provider on 127.0.0.1 for the single sign-on tests: panva's oidc-provider (the
certified Node implementation), pinned below, installed with npm once into var/ of the checkout
(kept between runs; a new pin installs beside it) and started for the test session with
provider.mjs beside this file, on a free port. The people it knows are the ``PEOPLE`` below, kept
in a file the provider reads at every look-up: ``provider.person(...)`` changes one mid-test.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import select
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

OIDC_PROVIDER_VERSION = "9.13.3"
HERE = Path(__file__).resolve().parent
CACHE = HERE.parents[2] / "var" / f"oidc-provider-{OIDC_PROVIDER_VERSION}"
CLIENT_ID, CLIENT_SECRET = "reckon", "reckon-test-secret"
GROUP_MAP = "reckon-oncall=oncall; reckon-compliance=compliance; reckon-managers=manager; reckon-admins=admin; acme-only=tenant:acme"


def _person(name: str, groups: list[str], **extra) -> dict:
    first, _, last = name.partition(" ")
    login = first.lower()
    claims = {"name": name, "given_name": first, "family_name": last, "email": f"{login}@example.com", "email_verified": True, "preferred_username": login, "groups": groups}
    return {"claims": claims, "disabled": False, "tamper": "", **extra}


PEOPLE = {
    "sub-olivia": _person("Olivia Oncall", ["reckon-oncall", "staff"]),
    "sub-colin": _person("Colin Compliance", ["reckon-compliance", "acme-only"]),
    "sub-nemo": _person("Nemo Nobody", ["marketing", "staff"]),
    "sub-dora": _person("Dora Departing", ["reckon-oncall"]),
    "sub-adam": _person("Adam Admin", ["reckon-admins"]),
    "sub-fiona": _person("Fiona Forged", ["reckon-oncall"], tamper="forged"),
    "sub-alex": _person("Alex Audience", ["reckon-oncall"], tamper="audience"),
    "sub-eddie": _person("Eddie Expired", ["reckon-oncall"], tamper="expired"),
}


def _installed() -> Path:
    """node_modules holding oidc-provider at the pinned version, installed by npm once per pin
    (under a lock: several test processes may ask at once)."""
    modules = CACHE / "node_modules"
    marker = modules / "oidc-provider" / "package.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists() or json.loads(marker.read_text())["version"] != OIDC_PROVIDER_VERSION:
            (CACHE / "package.json").write_text(json.dumps({"private": True, "dependencies": {"oidc-provider": OIDC_PROVIDER_VERSION}}))
            subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CACHE, check=True, timeout=300)
    return modules


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OidcProvider:
    def __init__(self, issuer: str, users_file: Path):
        self.issuer = issuer
        self.users_file = users_file
        self.reset()

    def reset(self) -> None:
        self.people = copy.deepcopy(PEOPLE)
        self._write()

    def person(self, sub: str, *, groups: list[str] | None = None, disabled: bool | None = None) -> None:
        if groups is not None:
            self.people[sub]["claims"]["groups"] = groups
        if disabled is not None:
            self.people[sub]["disabled"] = disabled
        self._write()

    def _write(self) -> None:
        tmp = self.users_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.people))
        os.replace(tmp, self.users_file)


@pytest.fixture(scope="session")
def oidc_provider(live_server, tmp_path_factory):
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("the single sign-on tests need Node.js and npm (Debian's nodejs package) to run their OpenID provider")
    modules = _installed()
    port = _free_port()
    users_file = tmp_path_factory.mktemp("oidc") / "users.json"
    provider = OidcProvider(f"http://127.0.0.1:{port}", users_file)
    env = {
        **os.environ,
        "OIDC_MODULES": str(modules),
        "PORT": str(port),
        "USERS_FILE": str(users_file),
        "REDIRECT_URI": f"{live_server.url}/oidc/callback/",
        "POST_LOGOUT_URI": f"{live_server.url}/login/?signed_out=1",
    }
    # Its output goes to a file, never a pipe nobody reads (a full pipe would stall the provider).
    # It says it is listening on a pipe of its own (READY_FD), written once and closed: waited
    # for, not polled; the pipe ends unwritten if the provider exits first.
    log_path = users_file.with_name("provider.log")
    log = open(log_path, "w")
    ready_r, ready_w = os.pipe()
    try:
        process = subprocess.Popen(["node", str(HERE / "provider.mjs")], env={**env, "READY_FD": str(ready_w)}, stdout=log, stderr=subprocess.STDOUT, text=True, pass_fds=(ready_w,))
    finally:
        os.close(ready_w)
    try:
        with os.fdopen(ready_r, "rb") as ready:
            said = ready.readline() if select.select([ready], [], [], 30)[0] else b""
        if said != b"listening\n":
            process.kill()
            pytest.fail(f"the OpenID provider did not start: {log_path.read_text()}")
        with urllib.request.urlopen(f"{provider.issuer}/.well-known/openid-configuration", timeout=10) as r:
            assert json.load(r)["issuer"] == provider.issuer
        yield provider
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture
def sso(oidc_provider, settings, transactional_db):
    """Reckon configured for the provider, as the environment would (docs/configuration.md), with
    the console's groups present; the provider's people as PEOPLE says."""
    from access.roles import roles_ensure
    from reckon.oidc_env import oidc_group_map

    oidc_provider.reset()
    settings.RECKON_OIDC_ISSUER = oidc_provider.issuer
    settings.RECKON_OIDC_CLIENT_ID = CLIENT_ID
    settings.RECKON_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.RECKON_OIDC_SCOPES = "openid email profile groups"
    settings.RECKON_OIDC_GROUPS_CLAIM = "groups"
    settings.RECKON_OIDC_GROUP_MAP = oidc_group_map("RECKON_OIDC_GROUP_MAP", GROUP_MAP)
    settings.RECKON_OIDC_SESSION_S = 3600
    roles_ensure()
    return oidc_provider
