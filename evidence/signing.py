"""The Ed25519 key that signs chain checkpoints and evidence bundles, and the checkpoints themselves.

A checkpoint is every run's last seq and chain head at one moment, signed. Kept outside the
database (a file, object storage), it lets ``verify_chain --checkpoint`` notice a run that was later
rolled back or deleted by someone who could rewrite the database, head and all: they cannot
rewrite a signed file they do not hold, nor sign a new one without the key.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat, load_pem_private_key
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from access.chain import access_heads
from runs.models import Run
from runs.verify import Unusable, canonical_json, checkpoint_problem, key_fingerprint, public_keys

CHECKPOINT_VERSION = 1


def signing_key_load() -> Ed25519PrivateKey:
    """The signing key from RECKON_SIGNING_KEY(_FILE); with DEBUG on and none given, the one in
    var/signing_key.pem (generated on first use). ImproperlyConfigured names what is wrong."""
    pem = settings.RECKON_SIGNING_KEY
    if not pem:
        if not settings.DEBUG:
            raise ImproperlyConfigured("RECKON_SIGNING_KEY (or RECKON_SIGNING_KEY_FILE) is required when DEBUG is off: an Ed25519 private key in PEM")
        path = Path(settings.VAR_DIR) / "signing_key.pem"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            raw = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
            path.write_bytes(raw)
            path.chmod(0o600)
        pem = path.read_text(encoding="utf-8")
    try:
        key = load_pem_private_key(pem.encode("utf-8"), password=None)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"RECKON_SIGNING_KEY is not a usable PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ImproperlyConfigured("RECKON_SIGNING_KEY is not an Ed25519 private key")
    return key


def public_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


def fingerprint(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return key_fingerprint(public.public_bytes(Encoding.Raw, PublicFormat.Raw))


def retired_keys() -> dict[str, Ed25519PublicKey]:
    """The public halves of the signing keys used before the current one, by fingerprint, from
    RECKON_SIGNING_KEYS_RETIRED(_FILE) (PEM public keys one after another): checkpoints they
    signed still verify after the key is rotated (docs/evidence.md, "Rotating the signing key")."""
    pem = settings.RECKON_SIGNING_KEYS_RETIRED
    if not pem:
        return {}
    try:
        keys = public_keys(pem.encode("utf-8"), "RECKON_SIGNING_KEYS_RETIRED")
    except Unusable as exc:
        raise ImproperlyConfigured(str(exc)) from None
    return {fingerprint(k): k for k in keys}


def document_sign(*, key: Ed25519PrivateKey, doc: dict) -> dict:
    """``doc`` with ``key_fingerprint`` and ``signature`` (hex Ed25519 over the canonical JSON of
    everything but the signature) added."""
    body = {**doc, "key_fingerprint": fingerprint(key)}
    return {**body, "signature": key.sign(canonical_json(body)).hex()}


def checkpoint_build(*, key: Ed25519PrivateKey | None = None) -> dict:
    """A signed checkpoint of every chained run: ``{"version", "written_at", "runs": [{"run_id",
    "last_seq", "head", "access_count", "access_head"}], "key_fingerprint", "signature"}``: the access
    records' chain is pinned too, so that records removed from its end (and the head rewritten to
    match) are noticed against a checkpoint."""
    key = key or signing_key_load()
    runs = [{"run_id": r, "last_seq": n, "head": bytes(h).hex()} for r, n, h in Run.objects.exclude(head=None).order_by("run_id").values_list("run_id", "last_seq", "head").iterator()]
    access = access_heads()
    for entry in runs:
        entry.update(access.get(entry["run_id"], {}))
    doc = {"version": CHECKPOINT_VERSION, "written_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "runs": runs}
    return document_sign(key=key, doc=doc)


def checkpoint_write(*, folder: Path | None = None) -> Path:
    """Write a checkpoint into ``folder`` (default RECKON_CHECKPOINT_DIR) as
    ``checkpoint-<time>.json``, written whole or not at all; its path."""
    folder = Path(folder or settings.RECKON_CHECKPOINT_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    doc = checkpoint_build()
    path = folder / f"checkpoint-{doc['written_at'].replace(':', '').replace('-', '')}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def checkpoint_check_signature(*, doc: dict, key: Ed25519PrivateKey | None = None) -> str | None:
    """Why ``doc`` is not a checkpoint signed by our key (the current one, or a retired one:
    ``retired_keys``), or None."""
    key = key or signing_key_load()
    signer = doc.get("key_fingerprint") if isinstance(doc, dict) else None
    trusted = {fingerprint(key): key.public_key()} if signer == fingerprint(key) else retired_keys()
    why = checkpoint_problem(doc, trusted)
    if why and why.startswith("signed by another key"):
        return f"{why}, neither RECKON_SIGNING_KEY nor one in RECKON_SIGNING_KEYS_RETIRED"
    return why
