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
import os
import re
import stat
import sys
import zipfile
import zlib
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
# What a bundle may hold and how big, as read (a zip's members inflated): a file over its limit, or
# a bundle over the total, is refused before it is read (by its stated size) and while it is read
# (by the bytes that come), so a zip bomb costs no more memory than the limits.
MAX_FILE_BYTES = 256 << 20  # each file (--max-file-bytes)
MAX_BUNDLE_BYTES = 512 << 20  # all files together (--max-bundle-bytes)
SMALL_FILES = {"manifest.json": 1 << 20, "public_key.pem": 64 << 10}  # files that are never more than this
MAX_MEMBERS = 64  # entries of a zip
# JSON nested deeper than this is refused (objects and arrays; a line of events.jsonl counts its own
# object): the decoder and the canonical encoder recurse, and a reviewer's machine must not be made
# to exhaust its stack or its patience.
MAX_JSON_DEPTH = 256


# --- RFC 8785 (JSON Canonicalization Scheme) ----------------------------------------------------


def number_text(x: float) -> str:
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
        out.append(number_text(value))
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


def chain_links(prev: bytes, entries) -> list[bytes]:
    """The hashes after ``prev`` of entries appended in turn (``chain_link`` each): what an append
    writes beside its events."""
    out = []
    sha256 = hashlib.sha256
    for entry in entries:
        prev = sha256(prev + entry).digest()
        out.append(prev)
    return out


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
# A person signed in through the identity provider is also named by its issuer and subject (the
# stable pair a renamed person keeps); a record of anyone else has neither key, and hashes as before.
ACCESS_IDENTITY_FIELDS = ("actor_issuer", "actor_subject")


def access_canonical(record: dict) -> bytes:
    """The canonical bytes of one access record: JCS of exactly ``ACCESS_FIELDS``, and of
    ``ACCESS_IDENTITY_FIELDS`` where the record has them."""
    return canonical_json({k: record[k] for k in (*ACCESS_FIELDS, *(f for f in ACCESS_IDENTITY_FIELDS if f in record))})


# --- the bundle ---------------------------------------------------------------------------------


class Problem(Exception):
    """The bundle does not verify; the message names the first thing found wrong."""


class Unusable(Exception):
    """The bundle cannot be read at all (missing path, not a zip, no manifest)."""


class NotRegularFile(OSError):
    """A path that names something other than a regular file (a FIFO, a device, a folder, a
    socket); ``kind`` says what, in words."""

    def __init__(self, kind: str):
        self.kind = kind
        super().__init__(f"not a regular file ({kind})")


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a file"


def open_regular(path, *, buffering: int = -1):
    """``path`` opened for reading in binary, if it is a regular file (a symbolic link is followed
    to what it names); NotRegularFile otherwise, OSError when it cannot be opened. Opened without
    blocking, so that a FIFO with no writer is refused at once instead of waiting for one."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(_file_kind(mode))
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def _shown(name: str) -> str:
    """A file or member name for a one-line message: as it is when plain, else JSON-quoted (so a
    newline or an escape in a name cannot make the message look like another)."""
    return name if _PLAIN_NAME.fullmatch(name) else json.dumps(name, ensure_ascii=False)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class _Limits:
    """The size limits a bundle is read under, and the bytes read so far."""

    def __init__(self, file_bytes: int = MAX_FILE_BYTES, bundle_bytes: int = MAX_BUNDLE_BYTES):
        self.file_bytes, self.bundle_bytes, self.total = file_bytes, bundle_bytes, 0

    def cap(self, name: str) -> int:
        return min(self.file_bytes, SMALL_FILES.get(name, self.file_bytes))

    def over_file(self, name: str, size: int) -> str | None:
        """Why a file of ``size`` bytes is refused ("over the limit ..."), or None."""
        cap = self.cap(name)
        if size <= cap:
            return None
        return f"over the limit of {cap} for {name}" if cap < self.file_bytes else f"over the limit of {cap} per file (--max-file-bytes)"

    def over_bundle(self, total: int) -> str | None:
        if total <= self.bundle_bytes:
            return None
        return f"files of {total} bytes in all, over the limit of {self.bundle_bytes} (--max-bundle-bytes)"

    def read(self, stream, name: str, where: str) -> bytes:
        """``stream``'s bytes, refused (Unusable naming ``where``) as soon as they pass the file's or
        the bundle's limit: never more than the limit is held."""
        cap = self.cap(name)
        chunks, n = [], 0
        while True:
            block = stream.read(min(1 << 20, cap + 1 - n))
            if not block:
                break
            n += len(block)
            chunks.append(block)
            if n > cap:
                raise Unusable(f"{where}: more than {cap} bytes when read, {self.over_file(name, n)}")
            if self.total + n > self.bundle_bytes:
                raise Unusable(f"{where}: {self.over_bundle(self.total + n)}")
        self.total += n
        return b"".join(chunks)


def _folder_files(path: Path, limits: _Limits) -> dict[str, bytes]:
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise Unusable(f"{path}: {exc.strerror}") from None
    if len(names) > MAX_MEMBERS:
        raise Unusable(f"{path}: {len(names)} entries, more than a bundle's {MAX_MEMBERS}")
    opened = {}
    try:
        for name in names:
            where = path / name
            try:
                opened[name] = open_regular(where)
            except NotRegularFile as exc:
                raise Unusable(f"{where}: {exc}") from None
            except OSError as exc:
                raise Unusable(f"{where}: {exc.strerror}") from None
        sizes = {name: os.fstat(f.fileno()).st_size for name, f in opened.items()}
        for name, size in sizes.items():
            why = limits.over_file(name, size)
            if why:
                raise Unusable(f"{path / name}: {size} bytes, {why}")
        why = limits.over_bundle(sum(sizes.values()))
        if why:
            raise Unusable(f"{path}: {why}")
        return {name: limits.read(f, name, str(path / name)) for name, f in opened.items()}
    finally:
        for f in opened.values():
            f.close()


def _member_name(raw: str, where: Path) -> tuple[str, str] | None:
    """(folder, file name) of a zip member, folder "" for one at the top; None for a folder's own
    entry. Unusable for a name that leaves the bundle's folder or goes deeper than one folder."""
    parts = raw.split("/")
    if raw.startswith("/") or "\\" in raw or ":" in parts[0] or any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", ".."):
        raise Unusable(f"{where}: member {json.dumps(raw, ensure_ascii=False)}: a path outside the bundle's folder")
    if len(parts) > 2:
        raise Unusable(f"{where}: member {json.dumps(raw, ensure_ascii=False)}: deeper than one folder")
    if parts[-1] == "":
        return None
    return ("", parts[0]) if len(parts) == 1 else (parts[0] + "/", parts[1])


def _zip_files(path: Path, stream, limits: _Limits) -> dict[str, bytes]:
    try:
        zf = zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError):
        raise Unusable(f"{path}: neither a bundle folder nor a zip file") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise Unusable(f"{path}: {len(infos)} members, more than a bundle's {MAX_MEMBERS}")
        folder = None
        members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            shown = json.dumps(info.filename, ensure_ascii=False)
            placed = _member_name(info.filename, path)
            here = info.filename if placed is None else placed[0]
            if folder is None:
                folder = here
            elif here != folder:
                raise Unusable(f"{path}: member {shown}: in another folder than {json.dumps(folder, ensure_ascii=False)}")
            if placed is None:
                continue
            name = placed[1]
            if name in members:
                raise Unusable(f"{path}: member {shown} appears twice")
            if not _PLAIN_NAME.fullmatch(name):
                raise Unusable(f"{path}: member {shown}: not a file of an evidence bundle")
            if info.flag_bits & 0x1:
                raise Unusable(f"{path}: member {shown}: encrypted")
            why = limits.over_file(name, info.file_size)
            if why:
                raise Unusable(f"{path}: member {info.filename}: {info.file_size} bytes inflated, {why}")
            members[name] = info
        why = limits.over_bundle(sum(i.file_size for i in members.values()))
        if why:
            raise Unusable(f"{path}: {why}")
        files = {}
        for name, info in members.items():
            where = f"{path}: member {info.filename}"
            try:
                with zf.open(info) as member:
                    files[name] = limits.read(member, name, where)
            except Unusable:
                raise
            except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError, ValueError) as exc:
                raise Unusable(f"{where}: cannot be read: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - another decompressor's error (lzma, bz2): the member cannot be read
                raise Unusable(f"{where}: cannot be read: {type(exc).__name__}: {exc}") from None
        return files


def _bundle_files(path: Path, limits: _Limits | None = None) -> dict[str, bytes]:
    """A bundle's files' bytes by name, from a folder or a zip (its files at the top or in one
    folder): Unusable for anything that is not a regular file, a zip member whose name leaves the
    folder or is repeated, and files over the size limits."""
    limits = limits or _Limits()
    if path.is_dir():
        return _folder_files(path, limits)
    try:
        stream = open_regular(path)
    except NotRegularFile as exc:
        raise Unusable(f"{path}: {exc}") from None
    except FileNotFoundError:
        raise Unusable(f"{path}: no such file or folder") from None
    except OSError as exc:
        raise Unusable(f"{path}: {exc.strerror}") from None
    with stream:
        return _zip_files(path, stream, limits)


class _BadJson(ValueError):
    pass


def _pairs(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _BadJson(f"{_shown(duplicate)} appears twice in one object")
    return out


def _constant(name: str):
    raise _BadJson(f"{name} is not a JSON value")


def _too_deep(value) -> bool:
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        stack.extend((c, depth + 1) for c in (v.values() if type(v) is dict else v) if type(c) is dict or type(c) is list)
    return False


def json_read(raw: bytes | str):
    """One JSON document of a bundle (or a checkpoint): ValueError saying why it is not JSON, is
    nested deeper than ``MAX_JSON_DEPTH``, repeats a key in an object or holds NaN or Infinity."""
    try:
        value = json.loads(raw, object_pairs_hook=_pairs, parse_constant=_constant)
    except RecursionError:
        raise _BadJson(f"nested deeper than {MAX_JSON_DEPTH}") from None
    except _BadJson:
        raise
    except ValueError as exc:
        raise _BadJson(getattr(exc, "msg", None) or str(exc)) from None
    # Only a document with that many brackets can be that deep: the walk is for those alone.
    if (type(value) is dict or type(value) is list) and raw.count(b"[" if type(raw) is bytes else "[") + raw.count(b"{" if type(raw) is bytes else "{") > MAX_JSON_DEPTH and _too_deep(value):
        raise _BadJson(f"nested deeper than {MAX_JSON_DEPTH}")
    return value


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


def bundle_verify(
    path: Path, *, public_key_pem: bytes | None = None, checkpoints: list[tuple[str, dict]] = (), file_bytes: int = MAX_FILE_BYTES, bundle_bytes: int = MAX_BUNDLE_BYTES, warn=None
) -> str:
    """Verify the bundle at ``path``; the ``verified: ...`` line, or Problem naming the first fault
    (Unusable for a bundle that cannot be read safely: ``_bundle_files``).
    ``public_key_pem``: the pinned keys (``public_keys``): the bundle must be signed by one of them.
    ``checkpoints``: (name, document) of signed checkpoints kept apart from Reckon: the bundle must
    agree with each (``_checkpoint_compare``); a line is added per checkpoint. ``file_bytes``,
    ``bundle_bytes``: the size limits. ``warn``: called with each warning (a file nothing binds)."""
    files = _bundle_files(path, _Limits(file_bytes, bundle_bytes))
    return files_verify(files, public_key_pem=public_key_pem, checkpoints=checkpoints, warn=warn)


def verified_line(run_id: str, last_seq: int, head: str) -> str:
    """What the verifier says of a bundle that verifies (before any checkpoint's line)."""
    return f"verified: {run_id} seq 1..{last_seq} head {head}"


def files_digests(files: dict[str, bytes]) -> dict[str, str]:
    """The manifest's ``files``: each file's sha256 (hex) by name, the manifest itself aside."""
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items()) if name != "manifest.json"}


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _files_listed(manifest: dict, files: dict[str, bytes]) -> None:
    """The bundle holds exactly the files the signed manifest lists (``_files_bound`` then checks
    their bytes). A manifest without ``files`` (exported before bundles listed them): the bundle
    holds none but the files a bundle had then."""
    listed = manifest.get("files")
    if listed is None:
        for name in sorted(files):
            if name not in BUNDLE_FILES:
                raise Problem(f"{_shown(name)}: not a file of an evidence bundle")
        return
    if not isinstance(listed, dict) or not all(isinstance(v, str) and _HEX64.fullmatch(v) for v in listed.values()):
        raise Problem("manifest files is not an object of file names to sha256 hex")
    for name in listed:
        if not _PLAIN_NAME.fullmatch(name) or name == "manifest.json":
            raise Problem(f"manifest files: {_shown(name)} is not a file name of a bundle")
    for name in sorted(files):
        if name != "manifest.json" and name not in listed:
            raise Problem(f"{_shown(name)}: in the bundle but not listed in the signed manifest")
    for name in sorted(listed):
        if name not in files:
            raise Problem(f"{name} missing from the bundle")


def _files_bound(manifest: dict, files: dict[str, bytes], warn) -> None:
    """Every file of the bundle is the one the signed manifest lists, byte for byte (its sha256).
    A manifest without ``files`` binds its events, access records and key through the chain and
    the signature alone: decisions.jsonl is then checked line by line against events.jsonl, and
    report.html, which nothing binds, is warned of."""
    listed = manifest.get("files")
    if listed is None:
        if "decisions.jsonl" in files:
            events = {hashlib.sha256(line).digest() for line in files["events.jsonl"].split(b"\n")}
            for lineno, line in enumerate(files["decisions.jsonl"].split(b"\n"), start=1):
                if line and hashlib.sha256(line).digest() not in events:
                    raise Problem(f"decisions.jsonl line {lineno}: not a line of events.jsonl")
        if "report.html" in files and warn is not None:
            warn("report.html is not bound to the signature (the manifest, written before bundles listed their files, does not cover it)")
        return
    for name, want in sorted(listed.items()):
        if hashlib.sha256(files[name]).hexdigest() != want:
            raise Problem(f"{name}: sha256 differs from the signed manifest's (changed after signing)")


def files_verify(files: dict[str, bytes], *, public_key_pem: bytes | None = None, checkpoints: list[tuple[str, dict]] = (), warn=None) -> str:
    """Verify a bundle given as its files' bytes by name (see ``bundle_verify``): the manifest and
    its signature, the bundle's files against the manifest's list, the events' chain, the access
    records' chain, then the files' bytes; each checkpoint compared with what the chains hold."""
    for name in ("manifest.json", "events.jsonl", "public_key.pem"):
        if name not in files:
            raise Problem(f"{name} missing from the bundle")
    manifest = _manifest_read(files["manifest.json"])
    # The signature first: nothing else in the manifest means anything until it is known to be
    # the one the signing key wrote.
    pinned = _signature_check(manifest, files["public_key.pem"], public_key_pem)
    # The bundle holds the files the signed manifest lists, no more, no fewer; their bytes are
    # compared last, after the chain, which names the line where an event was changed.
    _files_listed(manifest, files)
    run_id, last = manifest["run_id"], manifest["last_seq"]
    if manifest["first_seq"] != 1:
        raise Problem(f"manifest first_seq is {manifest['first_seq']}; a bundle starts at seq 1")
    # Each checkpoint's entry for this run, once its signature is known to be one of the trusted
    # keys' (the pinned ones, else the bundle's own); the chains below keep the hashes at their seqs.
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
    head = _events_chain(manifest, files["events.jsonl"], at_seq)
    access_n = _access_chain(manifest, files.get("access.jsonl", b""), at_count)
    _files_bound(manifest, files, warn)
    lines = [verified_line(run_id, last, head)]
    for name, doc, entry in marks:
        lines.append(_checkpoint_compare(name, doc, entry, run_id=run_id, last=last, heads=at_seq, access=access_n, access_heads=at_count))
    return "\n".join(lines)


def _manifest_read(raw: bytes) -> dict:
    """The manifest, with every field it must have and the encoding this verifier reads."""
    try:
        manifest = json_read(raw)
    except ValueError as exc:
        raise Problem(f"manifest.json: not JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise Problem("manifest.json is not a JSON object")
    absent = [f for f in (*MANIFEST_FIELDS, "signature") if f not in manifest]
    if absent:
        raise Problem(f"manifest lacks {', '.join(absent)}")
    if manifest["encoding"] != ENCODING:
        raise Problem(f"manifest encoding {manifest['encoding']!r} is not {ENCODING!r}")
    return manifest


def _signature_check(manifest: dict, bundled_pem: bytes, public_key_pem: bytes | None) -> list:
    """Check the manifest's signature by the bundle's key, which must be a pinned one when keys
    are pinned; the trusted keys returned (the pinned ones, else the bundle's own)."""
    bundled_key = _public_key(bundled_pem, "public_key.pem")
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
    return pinned


def _events_chain(manifest: dict, data: bytes, at_seq: dict) -> str:
    """Link events.jsonl's lines from the run's genesis, each to the hash it states, and compare
    the last with the signed head; the hex head returned. ``at_seq``: seqs whose hash to keep."""
    run_id, last = manifest["run_id"], manifest["last_seq"]
    v2_upto, withheld_prev = _chain_fields(manifest, last)
    prev = genesis(run_id, v2_upto=v2_upto)
    expected = 1
    for lineno, obj in _lines(data, ""):
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
            prev = event_link(prev, seq, _line_canonical(obj, seq, lineno), v2_upto)
        if obj.get("hash") != prev.hex():
            raise Problem(f"line {lineno}: hash mismatch (seq {seq})")
        if seq in at_seq:
            at_seq[seq] = prev.hex()
        expected += 1
    if expected - 1 != last:
        raise Problem(f"truncated: manifest says {last}, file has {expected - 1}")
    if manifest["head"] != prev.hex():
        raise Problem("manifest head differs")
    return prev.hex()


def _line_canonical(obj: dict, seq: int, lineno: int) -> bytes:
    """The canonical bytes of an event line that shows its event (sealed values by commitment)."""
    missing = [k for k in ("type", "ts", "payload", "hash") if k not in obj]
    if missing:
        raise Problem(f"line {lineno}: lacks {', '.join(missing)}")
    commitments = _commitments(obj, lineno)
    try:
        return sealed_event_canonical(seq=seq, type=str(obj["type"]), ts=str(obj["ts"]), v=int(obj.get("v", 1)), payload=obj["payload"], commitments=commitments)
    except KeyError as exc:
        raise Problem(f"line {lineno}: sealed value {exc.args[0]} is not in the payload") from None
    except (TypeError, ValueError) as exc:
        raise Problem(f"line {lineno}: seq {seq}: payload cannot be encoded: {exc}") from None


def _access_chain(manifest: dict, data: bytes, at_count: dict) -> int:
    """The access records (who was shown the run's sensitive values), chained per run the same
    way, compared with the manifest's count and head; their number returned. ``at_count``: counts
    whose hash to keep."""
    aprev = access_genesis(manifest["run_id"])
    n = 0
    for lineno, rec in _lines(data, "access.jsonl "):
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
    return n


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
            obj = json_read(raw)
        except ValueError as exc:
            raise Problem(f"{what}line {lineno}: not JSON ({exc})") from None
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
        with open_regular(name) as f:
            data = _Limits().read(f, name, f"{option} {name}")
        return parse(data)
    except NotRegularFile as exc:
        raise Unusable(f"{option} {name}: {exc}") from None
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
    parser.add_argument("--max-file-bytes", type=int, default=MAX_FILE_BYTES, metavar="N", help=f"refuse a file (a zip member, inflated) larger than this (default {MAX_FILE_BYTES})")
    parser.add_argument("--max-bundle-bytes", type=int, default=MAX_BUNDLE_BYTES, metavar="N", help=f"refuse a bundle whose files add up to more than this (default {MAX_BUNDLE_BYTES})")
    args = parser.parse_args(argv)
    try:
        checkpoints = [(name, _option_file("--checkpoint", name, json_read)) for name in args.checkpoint or ()]
        # Each key file is read on its own first, so that a fault names its file.
        pems = [_option_file("--public-key", name, lambda pem, name=name: public_keys(pem, f"--public-key {name}") and pem) for name in args.public_key or ()]
        said = bundle_verify(
            Path(args.path),
            public_key_pem=b"\n".join(pems) if pems else None,
            checkpoints=checkpoints,
            file_bytes=args.max_file_bytes,
            bundle_bytes=args.max_bundle_bytes,
            warn=lambda text: print(f"reckon-verify: warning: {text}", file=sys.stderr),
        )
        print(said)
    except Problem as exc:
        print(str(exc))
        return 1
    except Unusable as exc:
        print(f"reckon-verify: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
