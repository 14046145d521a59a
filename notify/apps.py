from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "notify"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Registered after recovery's projection (INSTALLED_APPS order), so the outbox projector
        # reads the uncertain-call rows as the same append has just left them. Only the types that
        # can cause a notification are named: the agent's hot start and completion never run it,
        # and keep their one-statement append.
        import notify.tasks  # noqa: F401 (registers the delivery task the outbox enqueues by name)
        from notify.outbox import NOTIFY_TYPES, outbox_project, outbox_rider
        from runs.store import projector_register

        # An escalation's rows ride in the append's own statement (outbox_rider): with routes
        # loaded, the append makes the same round trips as without.
        projector_register(outbox_project, types=NOTIFY_TYPES, rider=outbox_rider)
