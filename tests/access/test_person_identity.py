"""The record names the person: decisions, claims, notes and the access record of someone signed in
through the identity provider carry its issuer and subject beside their name, so a renamed person
stays the same actor; the access chain covers the pair and an evidence bundle still verifies."""

from __future__ import annotations

from io import StringIO

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.core.management import call_command

from access.models import PersonIdentity
from access.services import access_record_write
from access.tokens import principal_for_user
from runs.models import Event
from runs.verify import Problem, bundle_verify
from tests.access.seed import seed_runs
from tests.console.helpers import _user

ISSUER = "https://sso.example.com/realms/ops"


@pytest.fixture
def olivia(roles):
    user = _user("olivia", "oncall")
    PersonIdentity.objects.create(user=user, issuer=ISSUER, subject="f3a9-olivia")
    return user


def _by(run_id: str, type_: str) -> list[dict]:
    return [
        {k: e.payload.get(k) for k in ("by", "by_issuer", "by_subject", "action")}
        for e in Event.objects.filter(run_id=run_id, type=type_).order_by("seq")
    ]


def test_claims_notes_and_decisions_carry_the_issuer_and_subject_beside_the_name(olivia, conflict_call):
    from recovery.decisions import call_claim, call_note, decision_record

    row = call_claim(pk=conflict_call.pk, user=olivia, seen_version=conflict_call.version)
    olivia.username = "olivia.renamed"
    olivia.save()
    olivia.refresh_from_db()
    call_note(pk=row.pk, by=olivia, text="checking with the ledger team")
    row = type(row).objects.get(pk=row.pk)
    decision_record(pk=row.pk, decision="not_happened", by=olivia, reason="the ledger shows no posting", seen_version=row.version)
    notes = _by("run-conflict", "operator_note")
    assert notes == [
        {"by": "olivia", "by_issuer": ISSUER, "by_subject": "f3a9-olivia", "action": "claim"},
        {"by": "olivia.renamed", "by_issuer": ISSUER, "by_subject": "f3a9-olivia", "action": "note"},
    ]
    assert _by("run-conflict", "approval_decided")[-1] == {"by": "olivia.renamed", "by_issuer": ISSUER, "by_subject": "f3a9-olivia", "action": None}
    assert _by("run-conflict", "tool_call_resolved")[-1]["by_subject"] == "f3a9-olivia"


def test_a_local_user_is_named_as_before(roles, conflict_call):
    from recovery.decisions import call_claim

    local = _user("ada.local", "oncall")
    call_claim(pk=conflict_call.pk, user=local, seen_version=conflict_call.version)
    assert _by("run-conflict", "operator_note") == [{"by": "ada.local", "by_issuer": None, "by_subject": None, "action": "claim"}]


@pytest.mark.django_db(transaction=True)
def test_the_access_record_and_its_chain_carry_the_identity_and_the_bundle_verifies(settings, tmp_path, roles):
    settings.RECKON_SIGNING_KEY = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    seed_runs()
    colin = _user("colin", "compliance")
    PersonIdentity.objects.create(user=colin, issuer=ISSUER, subject="77c1-colin")
    record = access_record_write(who=principal_for_user(colin), front_end="console", run_id="run-acme", why="audit", fields=["arguments.account"], seq=2)
    assert (record.actor_name, record.actor_issuer, record.actor_subject) == ("colin", ISSUER, "77c1-colin")
    out = tmp_path / "bundle"
    buf = StringIO()
    call_command("export_evidence", "run-acme", "--out", str(out), "--by", "carol", stdout=buf)
    assert bundle_verify(out) == buf.getvalue().strip()
    access = (out / "access.jsonl").read_text()
    assert '"actor_subject":"77c1-colin"' in access.replace(" ", "")
    # Changing the subject in the bundle breaks the chain: the pair is covered, not decoration.
    (out / "access.jsonl").write_text(access.replace("77c1-colin", "77c1-mallory"))
    with pytest.raises(Problem, match="access"):
        bundle_verify(out)
