"""reckon-verify: check a Reckon evidence bundle offline.

This module needs only the Python standard library and ``cryptography`` (for the Ed25519
signature): no Django, no database, no project settings. It can be copied out and run as a single
file (``python verify.py BUNDLE``) by a reviewer who trusts nothing else Reckon ships. The store
imports its canonical encoding and chain functions from here, so the writer and the verifier share
one definition (tests check it against an independent RFC 8785 implementation).

The encoding, the chain and the manifest are specified in docs/evidence.md. In short::

    canonical(event) = JCS({"seq": n, "type": t, "ts": "YYYY-MM-DDTHH:MM:SS.ffffffZ", "v": v, "payload": p})
    genesis(run_id)  = sha256(b"reckon/chain/v1\\n" + run_id as UTF-8)
    hash(1)          = sha256(genesis(run_id) + canonical(event 1))
    hash(n)          = sha256(hash(n - 1) + canonical(event n))

Exit status: 0 when the bundle verifies, 1 when it does not (the first problem is printed), 2 when
the command line or a file cannot be used at all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

ENCODING = "reckon-jcs-v1"
GENESIS_PREFIX = b"reckon/chain/v1\n"
BUNDLE_FILES = ("events.jsonl", "manifest.json", "public_key.pem", "access.jsonl", "decisions.jsonl", "report.html")
MANIFEST_FIELDS = ("run_id", "first_seq", "last_seq", "head", "encoding", "exported_at", "exported_by", "key_fingerprint")


# --- RFC 8785 (JSON Canonicalization Scheme) ----------------------------------------------------


def _number(x: float) -> str:
    """A double as ECMAScript's Number.prototype.toString writes it (RFC 8785 section 3.2.2.3)."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{x!r} has no JSON form")
    if x == 0:
        return "0"  # -0 too
    sign = "-" if x < 0 else ""
    digits, _, exp = repr(abs(x)).partition("e")
    # repr gives the shortest digits that round-trip, as ECMAScript does; only the layout differs.
    # d: those digits without leading or trailing zeros; n: where the decimal point sits after
    # the first n of them (ECMAScript's k and n).
    whole, _, frac = digits.partition(".")
    d = whole + frac
    n = len(whole) + (int(exp) if exp else 0)
    stripped = d.lstrip("0")
    n -= len(d) - len(stripped)
    d = stripped.rstrip("0")
    k = len(d)
    if k <= n <= 21:
        return sign + d + "0" * (n - k)
    if 0 < n <= 21:
        return sign + d[:n] + "." + d[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + d
    e = n - 1
    head = d[0] + ("." + d[1:] if k > 1 else "")
    return f"{sign}{head}e{'+' if e > 0 else '-'}{abs(e)}"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif "\ud800" <= ch <= "\udfff":
            raise ValueError("a lone surrogate has no UTF-8 form")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be")  # RFC 8785 sorts property names by their UTF-16 code units


def _canonical(value, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        # Integers are written in full. Inside +-(2**53 - 1) that is exactly RFC 8785's form; beyond it
        # RFC 8785 would round through a double, and Reckon will not let a hash ignore digits.
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _canonical(item, out)
        out.append("]")
    elif isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value, key=_utf16_key)):
            if not isinstance(key, str):
                raise TypeError(f"object key {key!r} is not a string")
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _canonical(value[key], out)
        out.append("}")
    else:
        raise ValueError(f"{type(value).__name__} is not JSON")


def canonical_json(value) -> bytes:
    """``value`` (decoded JSON) in the JSON Canonicalization Scheme, as UTF-8 bytes."""
    out: list[str] = []
    _canonical(value, out)
    return "".join(out).encode("utf-8")


# --- events and the chain -----------------------------------------------------------------------


def ts_text(ts: datetime) -> str:
    """A stored timestamp as the chain writes it: UTC, microseconds always, ``Z``."""
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_canonical(*, seq: int, type: str, ts: str, v: int, payload_canonical: bytes) -> bytes:
    """The canonical bytes of one event, given its payload's canonical bytes.

    The keys of the event object in JCS order are payload, seq, ts, type, v.
    """
    return b'{"payload":%b,"seq":%d,"ts":%b,"type":%b,"v":%d}' % (payload_canonical, seq, _string(ts).encode(), _string(type).encode(), v)


def genesis(run_id: str) -> bytes:
    """The chain's hash before seq 1 of ``run_id``."""
    return hashlib.sha256(GENESIS_PREFIX + run_id.encode("utf-8")).digest()


def chain_link(prev: bytes, canonical: bytes) -> bytes:
    return hashlib.sha256(prev + canonical).digest()


# --- the bundle ---------------------------------------------------------------------------------


class Problem(Exception):
    """The bundle does not verify; the message names the first thing found wrong."""


class Unusable(Exception):
    """The bundle cannot be read at all (missing path, not a zip, no manifest)."""


def _bundle_files(path: Path) -> dict[str, bytes]:
    if path.is_dir():
        return {name: (path / name).read_bytes() for name in BUNDLE_FILES if (path / name).is_file()}
    if not path.is_file():
        raise Unusable(f"{path}: no such file or folder")
    try:
        with zipfile.ZipFile(path) as zf:
            files = {}
            for info in zf.infolist():
                name = info.filename.rsplit("/", 1)[-1]
                if name in BUNDLE_FILES:
                    files[name] = zf.read(info)
            return files
    except zipfile.BadZipFile:
        raise Unusable(f"{path}: neither a bundle folder nor a zip file") from None


def manifest_signed_bytes(manifest: dict) -> bytes:
    """What the signature covers: the manifest without its signature, canonical JSON."""
    return canonical_json({k: v for k, v in manifest.items() if k != "signature"})


def key_fingerprint(public_raw: bytes) -> str:
    """An Ed25519 public key's fingerprint: sha256 of its 32 raw bytes, hex."""
    return "sha256:" + hashlib.sha256(public_raw).hexdigest()


def _public_key(pem: bytes, where: str):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(pem)
    except ValueError:
        raise Unusable(f"{where}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise Unusable(f"{where}: not an Ed25519 public key")
    return key


def _raw(key) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _payload_canonical(payload, line: int, seq: int) -> bytes:
    try:
        return canonical_json(payload)
    except (TypeError, ValueError) as exc:
        raise Problem(f"line {line}: seq {seq}: payload cannot be encoded: {exc}") from None


def bundle_verify(path: Path, *, public_key_pem: bytes | None = None) -> str:
    """Verify the bundle at ``path``; the ``verified: ...`` line, or Problem naming the first fault."""
    files = _bundle_files(path)
    for name in ("manifest.json", "events.jsonl", "public_key.pem"):
        if name not in files:
            raise Problem(f"{name} missing from the bundle")
    try:
        manifest = json.loads(files["manifest.json"])
    except ValueError as exc:
        raise Problem(f"manifest.json is not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise Problem("manifest.json is not a JSON object")
    absent = [f for f in (*MANIFEST_FIELDS, "signature") if f not in manifest]
    if absent:
        raise Problem(f"manifest lacks {', '.join(absent)}")
    if manifest["encoding"] != ENCODING:
        raise Problem(f"manifest encoding {manifest['encoding']!r} is not {ENCODING!r}")

    # The signature first: nothing else in the manifest means anything until it is known to be
    # the one the signing key wrote.
    bundled_key = _public_key(files["public_key.pem"], "public_key.pem")
    if public_key_pem is not None:
        pinned = _public_key(public_key_pem, "--public-key")
        if _raw(pinned) != _raw(bundled_key):
            raise Problem("signature invalid: the bundle's public key is not the pinned one")
    if manifest["key_fingerprint"] != key_fingerprint(_raw(bundled_key)):
        raise Problem("manifest key_fingerprint differs from public_key.pem")
    try:
        signature = bytes.fromhex(manifest["signature"])
    except (TypeError, ValueError):
        raise Problem("signature invalid: not hex") from None
    from cryptography.exceptions import InvalidSignature

    try:
        bundled_key.verify(signature, manifest_signed_bytes(manifest))
    except InvalidSignature:
        raise Problem("signature invalid") from None

    run_id = manifest["run_id"]
    first, last = manifest["first_seq"], manifest["last_seq"]
    if first != 1:
        raise Problem(f"manifest first_seq is {first}; a bundle starts at seq 1")
    prev = genesis(run_id)
    expected = 1
    count = 0
    data = files["events.jsonl"]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for lineno, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw)
        except ValueError:
            raise Problem(f"line {lineno}: not JSON") from None
        if not isinstance(obj, dict):
            raise Problem(f"line {lineno}: not a JSON object")
        missing = [k for k in ("seq", "type", "ts", "payload", "hash") if k not in obj]
        if missing:
            raise Problem(f"line {lineno}: lacks {', '.join(missing)}")
        seq = obj["seq"]
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise Problem(f"line {lineno}: seq is not a whole number")
        if seq > expected:
            raise Problem(f"missing seq {expected}")
        if seq < expected:
            raise Problem(f"line {lineno}: seq {seq} out of order (expected {expected})")
        canon = event_canonical(seq=seq, type=str(obj["type"]), ts=str(obj["ts"]), v=int(obj.get("v", 1)), payload_canonical=_payload_canonical(obj["payload"], lineno, seq))
        prev = chain_link(prev, canon)
        if obj["hash"] != prev.hex():
            raise Problem(f"line {lineno}: hash mismatch (seq {seq})")
        expected += 1
        count += 1
    if count != last:
        raise Problem(f"truncated: manifest says {last}, file has {count}")
    if manifest["head"] != prev.hex():
        raise Problem("manifest head differs")
    return f"verified: {run_id} seq 1..{last} head {prev.hex()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reckon-verify", description="Verify a Reckon evidence bundle (a folder or its zip) offline.")
    parser.add_argument("path", help="the bundle folder or zip")
    parser.add_argument("--public-key", help="a PEM file with the Ed25519 key the bundle must be signed by")
    args = parser.parse_args(argv)
    try:
        pinned = Path(args.public_key).read_bytes() if args.public_key else None
    except OSError as exc:
        print(f"reckon-verify: --public-key {args.public_key}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        print(bundle_verify(Path(args.path), public_key_pem=pinned))
    except Problem as exc:
        print(str(exc))
        return 1
    except Unusable as exc:
        print(f"reckon-verify: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
