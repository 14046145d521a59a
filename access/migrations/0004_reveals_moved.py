"""Reveals and unmasked exports recorded before the access record existed were rows of Django's
admin log whose message starts "revealed ". They move into the access record (with their time,
person and run) and leave the admin log. Nothing is lost the other way: reversing puts them back."""

import re

from django.db import migrations

PREFIX = "revealed "
FIELD = re.compile(r"^revealed (?P<path>\S+) of event (?P<seq>\d+)$")
EXPORT = re.compile(r"^revealed every sensitive field in an unmasked (?P<fmt>\w+) export(?: \(sha256 (?P<digest>[0-9a-f]+)\))?$")


def forward(apps, schema_editor):
    LogEntry = apps.get_model("admin", "LogEntry")
    AccessRecord = apps.get_model("access", "AccessRecord")
    RunTenant = apps.get_model("runs", "RunTenant")
    moved = []
    rows = LogEntry.objects.filter(change_message__startswith=PREFIX, content_type__app_label="runs", content_type__model="run")
    for e in rows.select_related("user").order_by("action_time", "id"):
        run_id = e.object_id or ""
        tenants = ",".join(sorted(RunTenant.objects.filter(run_id=run_id).values_list("tenant", flat=True)))
        common = dict(at=e.action_time, actor_kind="user", actor_id=e.user_id, actor_name=getattr(e.user, "username", "") or f"user {e.user_id}", run_id=run_id, tenant=tenants)
        field, export = FIELD.match(e.change_message), EXPORT.match(e.change_message)
        if field:
            rec = AccessRecord(**common, front_end="console", seq=int(field["seq"]), fields=[field["path"]], why="(recorded before reasons were asked for)")
        elif export:
            why = f"GET /runs/{run_id}/export.{export['fmt']}" + (f" (sha256 {export['digest']})" if export["digest"] else "")
            rec = AccessRecord(**common, front_end="export", all_fields=True, why=why)
        else:
            rec = AccessRecord(**common, front_end="console", why=e.change_message)
        # Forward again after a reversal finds the records already there (the reversal leaves them).
        if not AccessRecord.objects.filter(at=rec.at, actor_id=rec.actor_id, run_id=rec.run_id, front_end=rec.front_end, seq=rec.seq).exists():
            moved.append(rec)
    AccessRecord.objects.bulk_create(moved)
    rows.delete()


def backward(apps, schema_editor):
    # The records cannot be removed (the table refuses DELETE); reversing writes the admin log
    # rows back and leaves the records in place, where migration 0002's reversal drops them.
    LogEntry = apps.get_model("admin", "LogEntry")
    ContentType = apps.get_model("contenttypes", "ContentType")
    AccessRecord = apps.get_model("access", "AccessRecord")
    ct, _ = ContentType.objects.get_or_create(app_label="runs", model="run")
    back = []
    for r in AccessRecord.objects.filter(actor_kind="user", front_end__in=["console", "export"]).order_by("at", "id"):
        if r.all_fields:
            digest = re.search(r"sha256 ([0-9a-f]+)", r.why)
            fmt = re.search(r"export\.(\w+)", r.why)
            msg = f"{PREFIX}every sensitive field in an unmasked {fmt[1] if fmt else 'jsonl'} export" + (f" (sha256 {digest[1]})" if digest else "")
        else:
            msg = f"{PREFIX}{', '.join(r.fields)} of event {r.seq}"
        if r.actor_id is not None:
            back.append(LogEntry(action_time=r.at, user_id=r.actor_id, content_type=ct, object_id=r.run_id, object_repr=r.run_id[:200], action_flag=2, change_message=msg))
    LogEntry.objects.bulk_create(back)


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0003_run_writer"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("runs", "0007_drop_replay_metric"),
    ]
    operations = [migrations.RunPython(forward, backward)]
