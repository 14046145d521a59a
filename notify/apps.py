from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "notify"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # The outbox is a read-model rule applied after the uncertain-call projection (the order
        # of runs.rules.ORDER, whatever INSTALLED_APPS says), so it reads the uncertain-call rows
        # as the same append has just left them.
        import notify.tasks  # noqa: F401 (registers the delivery task the outbox enqueues by name)
        from notify import outbox
        from runs.rules import rule_add

        rule_add(outbox.RULE)
