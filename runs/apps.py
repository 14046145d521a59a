from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Snapshots are taken after appends that cross the snapshot interval, whoever appends.
        from runs.store import after_append_register
        from runs.tasks import snapshot_on_append

        after_append_register(snapshot_on_append)
