"""reckon-verify: check a Reckon evidence bundle offline.

This module needs only the Python standard library and ``cryptography`` (for the Ed25519
signature): no Django, no database, no project settings. It can be copied out and run as a single
file (``python verify.py BUNDLE``) by a reviewer who trusts nothing else Reckon ships. The store
imports its canonical encoding and chain functions from here, so the writer and the verifier share
one definition (tests check it against an independent RFC 8785 implementation).

The encoding, the chain, sealed values and the manifest are specified in docs/evidence.md. In short::

    canonical(event) = JCS({"payload": p', ["sealed": {pointer: commitment},] "seq": n, "ts": "...Z", "type": t, "v": v})
    commitment       = sha256(salt + JCS(value)), the value at pointer in p replaced by "[sealed]" in p'
    genesis(run_id)  = sha256(b"reckon/chain/v3\\n" + run_id as UTF-8)
    hash(n)          = sha256(hash(n - 1) + canonical(event n)), hash(0) = genesis(run_id)

A run chained before Reckon's chain v3 (its manifest says ``chain_v2_upto: N``, or has no
``chain``) links its events 1..N by their digest instead, ``sha256(hash(n - 1) + sha256(canonical))``,
from ``sha256(b"reckon/chain/v2\\n" + run_id)``; later events are linked as above.

A masked bundle carries a sealed value's commitment instead of the value and its salt. An event it
cannot show even so (a sensitive value outside the sealed ones) is withheld: its line carries its
hash, and the signed manifest the hash before it, so the events before it stay bound to the head.

Exit status: 0 when the bundle verifies, 1 when it does not (the first problem is printed), 2 when
the command line or a file cannot be used at all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

ENCODING = "reckon-jcs-v2"
CHAIN = "reckon/chain/v3"
GENESIS_PREFIX = b"reckon/chain/v3\n"
GENESIS_PREFIX_V2 = b"reckon/chain/v2\n"
ACCESS_GENESIS_PREFIX = b"reckon/access/v1\n"
SEALED = "[sealed]"  # what stands in the chained payload for a sealed value
MASKED = "[masked]"  # what a bundle shows in place of a value it withholds
BUNDLE_FILES = ("events.jsonl", "manifest.json", "public_key.pem", "access.jsonl", "decisions.jsonl", "report.html")
MANIFEST_FIELDS = ("run_id", "first_seq", "last_seq", "head", "encoding", "exported_at", "exported_by", "key_fingerprint", "masked", "access_count", "access_head")


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


_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\ud800-\udfff]')


def _string(s: str) -> str:
    if _NEEDS_ESCAPE.search(s) is None:  # the common case: nothing to escape
        return '"' + s + '"'
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


def _plain_string(s: str) -> bytes:
    # A timestamp or an event type never needs an escape; anything else takes the exact encoder.
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return b'"' + s.encode() + b'"'
    return _string(s).encode()


def event_canonical(*, seq: int, type: str, ts: str, v: int, payload_canonical: bytes, sealed_canonical: bytes | None = None) -> bytes:
    """The canonical bytes of one event, given its payload's canonical bytes (sealed values
    already replaced by ``[sealed]``) and, for an event with sealed values, the canonical bytes of
    its ``{pointer: commitment}`` object.

    The keys of the event object in JCS order are payload, sealed (when present), seq, ts, type, v.
    """
    if sealed_canonical is None:
        return b'{"payload":%b,"seq":%d,"ts":%b,"type":%b,"v":%d}' % (payload_canonical, seq, _plain_string(ts), _plain_string(type), v)
    return b'{"payload":%b,"sealed":%b,"seq":%d,"ts":%b,"type":%b,"v":%d}' % (payload_canonical, sealed_canonical, seq, _plain_string(ts), _plain_string(type), v)


def genesis(run_id: str, *, v2_upto: int = 0) -> bytes:
    """The chain's hash before seq 1 of ``run_id``; that of chain v2 for a run whose first
    ``v2_upto`` events were chained by it."""
    return hashlib.sha256((GENESIS_PREFIX_V2 if v2_upto else GENESIS_PREFIX) + run_id.encode("utf-8")).digest()


def access_genesis(run_id: str) -> bytes:
    """The access records' chain hash before the run's first record."""
    return hashlib.sha256(ACCESS_GENESIS_PREFIX + run_id.encode("utf-8")).digest()


def digest(canonical: bytes) -> bytes:
    """An event's (or an access record's) digest: sha256 of its canonical bytes."""
    return hashlib.sha256(canonical).digest()


def chain_link(prev: bytes, entry: bytes) -> bytes:
    """The next hash of a chain: sha256 of the previous hash's 32 bytes and the entry's bytes (an
    event's canonical bytes; an access record's, or a chain v2 event's, digest)."""
    return hashlib.sha256(prev + entry).digest()


def event_link(prev: bytes, seq: int, canonical: bytes, v2_upto: int = 0) -> bytes:
    """The hash of the event at ``seq`` with these canonical bytes after ``prev``: linked by its
    bytes, or by their digest when ``seq`` is one of the first ``v2_upto`` (chain v2)."""
    return chain_link(prev, digest(canonical) if seq <= v2_upto else canonical)


def commitment(salt: bytes, value) -> bytes:
    """A sealed value's commitment: sha256(salt || JCS(value))."""
    return hashlib.sha256(salt + canonical_json(value)).digest()


def pointer_parts(pointer: str) -> list[str]:
    """An RFC 6901 JSON Pointer's reference tokens (``/arguments/account`` -> arguments, account)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"{pointer!r} is not a JSON Pointer")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def pointer_join(parts) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def pointer_get(doc, pointer: str):
    """The value at ``pointer`` in ``doc``; KeyError when there is none."""
    for t in pointer_parts(pointer):
        if isinstance(doc, dict) and t in doc:
            doc = doc[t]
        elif isinstance(doc, list) and t.isdigit() and int(t) < len(doc) and (t == "0" or not t.startswith("0")):
            doc = doc[int(t)]
        else:
            raise KeyError(pointer)
    return doc


def pointers_replace(doc, pointers, value):
    """A copy of ``doc`` with the value at each pointer replaced by ``value`` (the pointers must
    exist; KeyError otherwise). The payload is not changed."""
    for pointer in pointers:
        parts = pointer_parts(pointer)
        if not parts:
            raise KeyError(pointer)
        doc = _replace(doc, parts, value, pointer)
    return doc


def _replace(doc, parts, value, pointer):
    t, rest = parts[0], parts[1:]
    if isinstance(doc, dict) and t in doc:
        return {**doc, t: _replace(doc[t], rest, value, pointer) if rest else value}
    if isinstance(doc, list) and t.isdigit() and int(t) < len(doc):
        i = int(t)
        return [*doc[:i], _replace(doc[i], rest, value, pointer) if rest else value, *doc[i + 1 :]]
    raise KeyError(pointer)


def sealed_event_canonical(*, seq: int, type: str, ts: str, v: int, payload, commitments: dict[str, bytes]) -> bytes:
    """The canonical bytes of an event whose values at ``commitments``' pointers are sealed."""
    if not commitments:
        return event_canonical(seq=seq, type=type, ts=ts, v=v, payload_canonical=canonical_json(payload))
    chained = pointers_replace(payload, sorted(commitments), SEALED)
    sealed = canonical_json({p: c.hex() for p, c in commitments.items()})
    return event_canonical(seq=seq, type=type, ts=ts, v=v, payload_canonical=canonical_json(chained), sealed_canonical=sealed)


ACCESS_FIELDS = ("n", "at", "actor_kind", "actor_name", "front_end", "run_id", "call_id", "idempotency_key", "seq", "fields", "all_fields", "why")


def access_canonical(record: dict) -> bytes:
    """The canonical bytes of one access record: JCS of exactly ``ACCESS_FIELDS``."""
    return canonical_json({k: record[k] for k in ACCESS_FIELDS})


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


def checkpoint_problem(doc, trusted: dict) -> str | None:
    """Why ``doc`` is not a checkpoint signed by one of ``trusted`` (public keys by fingerprint),
    or None: the signature is Ed25519 over the canonical JSON of the checkpoint without it."""
    from cryptography.exceptions import InvalidSignature

    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list) or "signature" not in doc:
        return "not a checkpoint (needs runs and signature)"
    signer = doc.get("key_fingerprint")
    key = trusted.get(signer)
    if key is None:
        return f"signed by another key ({signer})"
    try:
        key.verify(bytes.fromhex(doc["signature"]), manifest_signed_bytes(doc))
    except (InvalidSignature, ValueError, TypeError):
        return "signature invalid"
    return None


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


# A PEM block of a public key; a keyring file holds one or more, with anything between them.
_PEM_PUBLIC = re.compile(rb"-----BEGIN PUBLIC KEY-----\r?\n[A-Za-z0-9+/=\r\n]*?-----END PUBLIC KEY-----")


def public_keys(pem: bytes, where: str) -> list:
    """Every Ed25519 public key of a PEM keyring (one key, or several one after another: the keys a
    signer has used over time), in order; Unusable naming ``where`` when there is none or one is
    not an Ed25519 public key."""
    blocks = _PEM_PUBLIC.findall(pem)
    if not blocks:
        raise Unusable(f"{where}: not a PEM public key")
    if len(blocks) == 1:
        return [_public_key(blocks[0], where)]
    return [_public_key(block, f"{where} (key {i} of {len(blocks)})") for i, block in enumerate(blocks, 1)]


def _raw(key) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def bundle_verify(path: Path, *, public_key_pem: bytes | None = None, checkpoints: list[tuple[str, dict]] = ()) -> str:
    """Verify the bundle at ``path``; the ``verified: ...`` line, or Problem naming the first fault.
    ``public_key_pem``: the pinned keys (``public_keys``): the bundle must be signed by one of them.
    ``checkpoints``: (name, document) of signed checkpoints kept apart from Reckon: the bundle must
    agree with each (``_checkpoint_compare``); a line is added per checkpoint."""
    return files_verify(_bundle_files(path), public_key_pem=public_key_pem, checkpoints=checkpoints)


def files_verify(files: dict[str, bytes], *, public_key_pem: bytes | None = None, checkpoints: list[tuple[str, dict]] = ()) -> str:
    """Verify a bundle given as its files' bytes by name (see ``bundle_verify``)."""
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
    pinned = public_keys(public_key_pem, "--public-key") if public_key_pem is not None else [bundled_key]
    if public_key_pem is not None:
        if _raw(bundled_key) not in {_raw(k) for k in pinned}:
            raise Problem(
                "signature invalid: the bundle's public key is not the pinned one" if len(pinned) == 1 else f"signature invalid: the bundle's public key is none of the {len(pinned)} pinned ones"
            )
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
    # Each checkpoint's entry for this run, once its signature is known to be one of the trusted
    # keys' (the pinned ones, else the bundle's own); the chain below keeps the hashes at their seqs.
    trusted = {key_fingerprint(_raw(k)): k for k in pinned}
    marks = []
    for name, doc in checkpoints:
        why = checkpoint_problem(doc, trusted)
        if why:
            raise Problem(f"checkpoint {name}: {why}")
        entry = next((r for r in doc["runs"] if isinstance(r, dict) and r.get("run_id") == run_id), None)
        marks.append((name, doc, entry))
    at_seq = {e["last_seq"]: None for _, _, e in marks if e is not None and isinstance(e.get("last_seq"), int)}
    at_count = {e["access_count"]: None for _, _, e in marks if e is not None and isinstance(e.get("access_count"), int)}
    v2_upto, withheld_prev = _chain_fields(manifest, last)
    prev = genesis(run_id, v2_upto=v2_upto)
    expected = 1
    count = 0
    for lineno, obj in _lines(files["events.jsonl"], ""):
        seq = obj.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise Problem(f"line {lineno}: seq is not a whole number")
        if seq > expected:
            raise Problem(f"missing seq {expected}")
        if seq < expected:
            raise Problem(f"line {lineno}: seq {seq} out of order (expected {expected})")
        if "withheld" in obj and seq <= v2_upto:
            prev = chain_link(prev, _hex(obj, "digest", lineno, 32))
        elif "withheld" in obj:
            # Its bytes are not shown, so its hash is taken as written; what binds the events
            # before it to the signed head is the hash before it, which the manifest signed.
            if withheld_prev.get(str(seq)) != prev.hex():
                raise Problem(f"line {lineno}: hash mismatch before withheld seq {seq}")
            prev = _hex(obj, "hash", lineno, 32)
        else:
            missing = [k for k in ("type", "ts", "payload", "hash") if k not in obj]
            if missing:
                raise Problem(f"line {lineno}: lacks {', '.join(missing)}")
            commitments = _commitments(obj, lineno)
            try:
                canon = sealed_event_canonical(seq=seq, type=str(obj["type"]), ts=str(obj["ts"]), v=int(obj.get("v", 1)), payload=obj["payload"], commitments=commitments)
            except KeyError as exc:
                raise Problem(f"line {lineno}: sealed value {exc.args[0]} is not in the payload") from None
            except (TypeError, ValueError) as exc:
                raise Problem(f"line {lineno}: seq {seq}: payload cannot be encoded: {exc}") from None
            prev = event_link(prev, seq, canon, v2_upto)
        if obj.get("hash") != prev.hex():
            raise Problem(f"line {lineno}: hash mismatch (seq {seq})")
        if seq in at_seq:
            at_seq[seq] = prev.hex()
        expected += 1
        count += 1
    if count != last:
        raise Problem(f"truncated: manifest says {last}, file has {count}")
    if manifest["head"] != prev.hex():
        raise Problem("manifest head differs")

    # The access records: who was shown the run's sensitive values, chained per run the same way.
    aprev = access_genesis(run_id)
    n = 0
    for lineno, rec in _lines(files.get("access.jsonl", b""), "access.jsonl "):
        absent = [k for k in (*ACCESS_FIELDS, "hash") if k not in rec]
        if absent:
            raise Problem(f"access.jsonl line {lineno}: lacks {', '.join(absent)}")
        if rec["n"] != n + 1:
            if isinstance(rec["n"], int) and rec["n"] > n + 1:
                raise Problem(f"missing access record {n + 1}")
            raise Problem(f"access.jsonl line {lineno}: record {rec['n']} out of order (expected {n + 1})")
        try:
            aprev = chain_link(aprev, digest(access_canonical(rec)))
        except (TypeError, ValueError) as exc:
            raise Problem(f"access.jsonl line {lineno}: cannot be encoded: {exc}") from None
        if rec["hash"] != aprev.hex():
            raise Problem(f"access.jsonl line {lineno}: hash mismatch (record {rec['n']})")
        n += 1
        if n in at_count:
            at_count[n] = aprev.hex()
    if n != manifest["access_count"]:
        raise Problem(f"access records truncated: manifest says {manifest['access_count']}, file has {n}")
    if (aprev.hex() if n else None) != manifest["access_head"]:
        raise Problem("manifest access head differs")
    lines = [f"verified: {run_id} seq 1..{last} head {prev.hex()}"]
    for name, doc, entry in marks:
        lines.append(_checkpoint_compare(name, doc, entry, run_id=run_id, last=last, heads=at_seq, access=n, access_heads=at_count))
    return "\n".join(lines)


def _chain_fields(manifest: dict, last) -> tuple[int, dict]:
    """The manifest's (signed) chain fields: how many first events chain v2 linked, and the hash
    before each withheld event by seq. A manifest without ``chain`` was written before chain v3:
    every event of its bundle is chain v2's."""
    if "chain" not in manifest:
        return (last if isinstance(last, int) else 0), {}
    if manifest["chain"] != CHAIN:
        raise Problem(f"manifest chain {manifest['chain']!r} is not {CHAIN!r}")
    v2_upto = manifest.get("chain_v2_upto", 0)
    if not isinstance(v2_upto, int) or isinstance(v2_upto, bool) or v2_upto < 0:
        raise Problem("manifest chain_v2_upto is not a whole number")
    withheld_prev = manifest.get("withheld_prev", {})
    if not isinstance(withheld_prev, dict):
        raise Problem("manifest withheld_prev is not an object")
    return v2_upto, withheld_prev


def _checkpoint_compare(name: str, doc: dict, entry: dict | None, *, run_id: str, last: int, heads: dict, access: int, access_heads: dict) -> str:
    """What a checkpoint says of the bundle's run: its line when they agree, else Problem. The run's
    history up to the checkpoint's seq must be the one the checkpoint pinned: a bundle that ends
    before it (rolled back) or holds another hash there (rewritten) was exported from a database
    changed after the checkpoint was written, whatever key signed the bundle."""
    when = doc.get("written_at")
    if entry is None:
        return f"checkpoint {name} (written {when}): does not list {run_id} (the run was chained after it)"
    seq = entry.get("last_seq")
    if not isinstance(seq, int) or seq > last:
        raise Problem(f"checkpoint {name}: rolled back: it holds {run_id} at seq {seq}, the bundle ends at seq {last}")
    if heads.get(seq) != entry.get("head"):
        raise Problem(f"checkpoint {name}: head differs at seq {seq}: the checkpoint's is {entry.get('head')}, the bundle's {heads.get(seq)}")
    if "access_count" in entry:
        count = entry["access_count"]
        if not isinstance(count, int) or count > access:
            raise Problem(f"checkpoint {name}: access rolled back: it holds {count} access records, the bundle {access}")
        if access_heads.get(count) != entry.get("access_head"):
            raise Problem(f"checkpoint {name}: access head differs at record {count}")
    return f"checkpoint {name} (written {when}): agrees at seq {seq}"


def _lines(data: bytes, what: str):
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for lineno, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw)
        except ValueError:
            raise Problem(f"{what}line {lineno}: not JSON") from None
        if not isinstance(obj, dict):
            raise Problem(f"{what}line {lineno}: not a JSON object")
        yield lineno, obj


def _hex(obj: dict, key: str, lineno: int, size: int) -> bytes:
    try:
        raw = bytes.fromhex(obj[key])
    except (KeyError, TypeError, ValueError):
        raw = b""
    if len(raw) != size:
        raise Problem(f"line {lineno}: {key} is not {size} bytes of hex")
    return raw


def _commitments(obj: dict, lineno: int) -> dict[str, bytes]:
    """The line's sealed values' commitments: computed from the value and its salt where the line
    shows the value, taken as written where it withholds it."""
    sealed = obj.get("sealed", {})
    if not isinstance(sealed, dict):
        raise Problem(f"line {lineno}: sealed is not an object")
    out = {}
    for pointer, seal in sealed.items():
        if not isinstance(seal, dict):
            raise Problem(f"line {lineno}: sealed {pointer} is not an object")
        if "salt" in seal:
            try:
                value = pointer_get(obj["payload"], pointer)
                pointer_parts(pointer)
            except (KeyError, ValueError):
                raise Problem(f"line {lineno}: sealed value {pointer} is not in the payload") from None
            out[pointer] = commitment(_hex(seal, "salt", lineno, 16), value)
        else:
            out[pointer] = _hex(seal, "commitment", lineno, 32)
    return out


def _option_file(option: str, name: str, parse):
    """What ``parse`` makes of the bytes of the file ``name`` given to ``option``; Unusable naming
    both when the file cannot be read, or is not JSON for a JSON option."""
    try:
        return parse(Path(name).read_bytes())
    except OSError as exc:
        raise Unusable(f"{option} {name}: {exc.strerror}") from None
    except ValueError as exc:
        raise Unusable(f"{option} {name}: not JSON: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reckon-verify", description="Verify a Reckon evidence bundle (a folder or its zip) offline.")
    parser.add_argument("path", help="the bundle folder or zip")
    parser.add_argument(
        "--public-key",
        action="append",
        metavar="FILE",
        help="a PEM file with the Ed25519 key (or keys, one after another) the bundle must be signed by; may be given again for more keys",
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        metavar="FILE",
        help="a signed checkpoint kept apart from Reckon: the bundle must agree with it (not rolled back, not rewritten); may be given again",
    )
    args = parser.parse_args(argv)
    try:
        checkpoints = [(name, _option_file("--checkpoint", name, json.loads)) for name in args.checkpoint or ()]
        # Each key file is read on its own first, so that a fault names its file.
        pems = [_option_file("--public-key", name, lambda pem, name=name: public_keys(pem, f"--public-key {name}") and pem) for name in args.public_key or ()]
        print(bundle_verify(Path(args.path), public_key_pem=b"\n".join(pems) if pems else None, checkpoints=checkpoints))
    except Problem as exc:
        print(str(exc))
        return 1
    except Unusable as exc:
        print(f"reckon-verify: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
