"""``import_runs`` reads regular files only, and lines up to a length it names: a symbolic link to
/dev/zero, a FIFO (which would block the open until a writer came), a folder, and a line longer
than ``RECKON_IMPORT_MAX_LINE_BYTES`` (which would be read whole into memory) are each refused in one
line, with a non-zero exit and nothing written. Real files, links and FIFOs; the command itself."""

from __future__ import annotations

import os
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections

from runs.importer import paths_import
from runs.models import Run
from tests.runs.helpers import good, line, nothing_stored

pytestmark = pytest.mark.django_db(transaction=True)


def import_runs(*paths, timeout: float = 30) -> tuple[int, str, str]:
    """``manage.py import_runs PATH...``: (exit status, stdout, stderr). Run in a thread with a
    deadline, so that an import that hangs fails the test instead of blocking it; a FIFO it waits
    on is then given a writer (and closed) to let it go."""
    out, err, done = StringIO(), StringIO(), {}

    def run():
        try:
            call_command("import_runs", *map(str, paths), stdout=out, stderr=err)
            done["code"] = 0
        except SystemExit as exc:
            done["code"] = exc.code
        finally:
            connections.close_all()  # the thread's own database connection

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        for p in paths:
            if os.path.exists(p) and not os.path.isfile(p) and not os.path.isdir(p):
                try:
                    os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
        t.join(10)
        pytest.fail(f"import_runs {paths} still running after {timeout} s")
    return done["code"], out.getvalue().strip(), err.getvalue().strip()


def test_a_symlink_to_dev_zero_is_refused_as_not_a_regular_file(tmp_path):
    link = tmp_path / "run-x.jsonl"
    link.symlink_to("/dev/zero")
    code, out, err = import_runs(link)
    assert code == 1 and out == f"{link}: rejected: not a regular file (a character device); only regular files are imported"
    assert err == "1 of 1 files rejected" and nothing_stored()


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "run-x.jsonl"
    os.mkfifo(fifo)
    code, out, _ = import_runs(fifo, timeout=15)
    assert code == 1 and out == f"{fifo}: rejected: not a regular file (a named pipe); only regular files are imported"
    assert nothing_stored()


def test_in_a_folder_a_fifo_or_a_device_named_jsonl_is_reported_not_skipped(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    os.mkfifo(folder / "run-fifo.jsonl")
    (folder / "run-x.jsonl").write_text(good())
    (folder / "run-dir.jsonl").mkdir()  # a folder named like a log: searched like any folder
    (folder / "run-dir.jsonl" / "run-y.jsonl").write_text(good(run_id="run-y"))
    code, out, _ = import_runs(folder, timeout=15)
    assert code == 1
    assert out.splitlines() == [
        f"{folder / 'run-dir.jsonl' / 'run-y.jsonl'}: imported 3 events as run run-y",
        f"{folder / 'run-fifo.jsonl'}: rejected: not a regular file (a named pipe); only regular files are imported",
        f"{folder / 'run-x.jsonl'}: imported 3 events as run run-x",
    ]
    assert not Run.objects.filter(run_id="run-fifo").exists()


def test_a_folder_given_by_name_with_no_logs_is_refused(tmp_path):
    code, out, _ = import_runs(tmp_path)
    assert code == 1 and out == f"{tmp_path}: rejected: no .jsonl files in this folder"


def test_a_line_longer_than_the_limit_is_refused_naming_it_and_nothing_is_written(tmp_path, settings):
    settings.RECKON_IMPORT_MAX_LINE_BYTES = 1 << 10
    log = tmp_path / "run-x.jsonl"
    log.write_text(good(n=2) + line(3, "user_message", {"content": "x" * 2000}) + line(4, "user_message", {"content": "after"}))
    code, out, _ = import_runs(log)
    assert code == 1 and out == f"{log}: rejected: line 3: longer than 1 KiB (RECKON_IMPORT_MAX_LINE_BYTES)"
    assert nothing_stored()
    # A line of exactly the limit (without its newline) is read.
    text = good(n=2)
    pad = (1 << 10) - len(line(3, "user_message", {"content": ""})) + 1
    text += line(3, "user_message", {"content": "y" * pad})
    assert len(text.splitlines()[-1]) == 1 << 10
    log.write_text(text)
    assert import_runs(log)[:2] == (0, f"{log}: imported 3 events as run run-x")


def test_a_last_line_without_newline_longer_than_the_limit_is_refused_not_taken_for_a_torn_tail(tmp_path, settings):
    settings.RECKON_IMPORT_MAX_LINE_BYTES = 1 << 10
    log = tmp_path / "run-x.jsonl"
    log.write_text(good() + '{"seq": 4, "type": "user_message", "payload": {"content": "' + "z" * 5000)
    code, out, _ = import_runs(log)
    assert code == 1 and out == f"{log}: rejected: line 4: longer than 1 KiB (RECKON_IMPORT_MAX_LINE_BYTES)"
    assert nothing_stored()


def test_the_default_limit_refuses_a_huge_file_without_a_newline_with_memory_bounded(tmp_path, settings):
    import resource

    assert settings.RECKON_IMPORT_MAX_LINE_BYTES == 4 << 20
    log = tmp_path / "run-x.jsonl"
    with open(log, "wb") as f:
        f.write(good().encode())
        f.truncate(f.tell() + (256 << 20))  # 256 MiB of NUL bytes with no newline, as /dev/zero gives
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (result,) = paths_import([str(log)])
    assert result.outcome == "rejected" and result.reason == "line 4: longer than 4 MiB (RECKON_IMPORT_MAX_LINE_BYTES)"
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 64 << 10, f"peak memory grew by {grown} KiB"
    assert nothing_stored()
