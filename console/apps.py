from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Reckon console"

    def ready(self):
        # Every process that appends (server, worker, agent using the store directly) keeps the
        # run-tenant read model in the append's own transaction.
        from console.logging import DECISION_TYPES, recovery_decisions_log
        from console.tenancy import TENANT_NAMING, run_tenants_project
        from runs.store import projector_register

        projector_register(run_tenants_project, types=TENANT_NAMING)
        projector_register(recovery_decisions_log, types=DECISION_TYPES)
