from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from runs.snapshots import snapshot_miss_register
        from runs.store import after_append_register, projector_register
        from runs.tasks import snapshot_on_append, snapshot_repair_enqueue
        from runs.tenants import TENANT_NAMING, run_tenants_project, run_tenants_statement

        # Every process that appends (server, worker, agent using the store directly) keeps the
        # run-tenant read model in the append's own transaction.
        projector_register(run_tenants_project, types=TENANT_NAMING, statement=run_tenants_statement)
        # Snapshots are taken after appends that cross the snapshot interval, whoever appends.
        after_append_register(snapshot_on_append)
        # A snapshot a read cannot use is settled by a task, never by the read itself.
        snapshot_miss_register(snapshot_repair_enqueue)
