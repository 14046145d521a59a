from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "Access: roles, tokens, tenancy"

    def ready(self) -> None:
        # Signed checkpoints pin each run's access-record chain too, so that records removed from
        # its end (and the head rewritten to match) are noticed against a checkpoint.
        from access.chain import access_heads
        from runs.signing import checkpoint_extra_register

        checkpoint_extra_register(access_heads)
