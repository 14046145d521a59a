"""The importer keeps data exactly as the file says it, or refuses the file naming line and reason:
duplicate keys, integers beyond 64 bits and nesting too deep are refused, not reinterpreted; a file
name that is not a run id and a symlink leading out of an imported folder are refused with a reason."""

import pytest

from runs.importer import log_import, paths_import
from runs.models import Run
from tests.runs.helpers import good, line, nothing_stored

pytestmark = pytest.mark.django_db


def _rejected(data: str | bytes, path="logs/run-x.jsonl"):
    result = log_import(path, data if isinstance(data, bytes) else data.encode())
    assert result.outcome == "rejected", result
    return result.reason


def test_a_duplicate_key_is_refused_naming_the_line_and_the_key():
    text = line(1, "run_started", {"run_id": "run-x"}) + '{"seq": 99, "seq": 2, "type": "user_message", "ts": "2026-09-08T11:00:00Z", "payload": {"content": "x"}}\n'
    assert _rejected(text) == "line 2: seq appears twice in one object (duplicate key)"
    assert nothing_stored()


def test_a_duplicate_key_inside_a_payload_is_refused_with_its_place():
    text = good() + '{"seq": 4, "type": "user_message", "ts": "2026-09-08T11:00:00Z", "payload": {"content": "a", "content": "b"}}\n'
    assert _rejected(text).startswith("line 4: payload.content appears twice")


def test_an_integer_beyond_64_bits_is_refused_not_kept_as_a_float():
    text = good() + line(4, "user_message", {"content": "x", "n": 18446744073709551617})
    assert "line 4: payload.n is an integer outside the signed 64-bit range" in _rejected(text)
    assert nothing_stored()


def test_a_line_nested_100000_deep_is_a_one_line_rejection():
    text = good() + "[" * 100_000 + "]" * 100_000 + "\n"
    assert _rejected(text) == "line 4: not JSON (nested too deeply)"
    torn = good() + '{"seq": 4, "payload": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert _rejected(torn).startswith("line 4: ")


@pytest.mark.parametrize("name", ["run\nx", "run'x", 'run"x', "..", ".hidden", "run x", "é", "r" * 201])
def test_a_file_name_that_is_not_a_run_id_is_refused_with_the_rule(name):
    reason = _rejected(good(run_id=name), path=f"logs/{name}.jsonl")
    assert reason.startswith("the file name does not give a run id: run id ")
    assert "ASCII letters, digits" in reason and "\n" not in reason
    assert not Run.objects.exists()


def test_a_symlink_leaving_an_imported_folder_is_not_followed(tmp_path):
    outside = tmp_path / "secret" / "run-secret.jsonl"
    outside.parent.mkdir()
    outside.write_text(good(run_id="run-secret"))
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "run-secret.jsonl").symlink_to(outside)
    (folder / "run-x.jsonl").write_text(good())
    (folder / "run-alias.jsonl").symlink_to(folder / "run-x.jsonl")  # stays inside: followed (and refused for its name's run id)
    results = {r.path.rsplit("/", 1)[-1]: r for r in paths_import([str(folder)])}
    assert results["run-secret.jsonl"].outcome == "rejected"
    assert "symbolic link to a file outside the imported folder; not followed" in results["run-secret.jsonl"].reason
    assert results["run-x.jsonl"].outcome == "imported"
    assert "names run 'run-x' but the file is named for 'run-alias'" in results["run-alias.jsonl"].reason
    assert not Run.objects.filter(run_id="run-secret").exists()
