from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from runs.snapshots import snapshot_miss_register
        from runs import tenants
        from runs.rules import rule_add
        from runs.store import after_append_register
        from runs.tasks import snapshot_on_append, snapshot_repair_enqueue

        # Every process that appends (server, worker, agent using the store directly) keeps the
        # run-tenant read model in the append's own transaction, in the order of runs.rules.ORDER.
        rule_add(tenants.RULE)
        # Snapshots are taken after appends that cross the snapshot interval, whoever appends.
        after_append_register(snapshot_on_append)
        # A snapshot a read cannot use is settled by a task, never by the read itself.
        snapshot_miss_register(snapshot_repair_enqueue)
