"""Moving a model or a permission holder between apps: its content type follows it.

Used by the migrations that moved models out of ``console`` (tables kept, state-only moves). A
content type is renamed in place, so every permission on it, and so every group and user granted
one, keeps working under the new app label. Where the new content type already exists (created by
a process that started between two migrate runs), the permissions move to it and the old one goes.
"""

from __future__ import annotations


def content_type_move(apps, *, old: tuple[str, str], new: tuple[str, str]) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    old_ct = ContentType.objects.filter(app_label=old[0], model=old[1]).first()
    if old_ct is None:
        return
    new_ct = ContentType.objects.filter(app_label=new[0], model=new[1]).first()
    if new_ct is None:
        old_ct.app_label, old_ct.model = new
        old_ct.save(update_fields=["app_label", "model"])
        return
    for p in Permission.objects.filter(content_type=old_ct):
        twin = Permission.objects.filter(content_type=new_ct, codename=p.codename).first()
        if twin is None:
            p.content_type = new_ct
            p.save(update_fields=["content_type"])
        else:
            for group in p.group_set.all():
                group.permissions.add(twin)
            for user in p.user_set.all():
                user.user_permissions.add(twin)
            p.delete()
    old_ct.delete()


def moves(*pairs: tuple[tuple[str, str], tuple[str, str]]):
    """A RunPython pair (forward, backward) moving each (old, new) content type."""

    def forward(apps, schema_editor):
        for old, new in pairs:
            content_type_move(apps, old=old, new=new)

    def backward(apps, schema_editor):
        for old, new in pairs:
            content_type_move(apps, old=new, new=old)

    return forward, backward
