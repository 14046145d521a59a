from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    verbose_name = "Recovery"

    def ready(self) -> None:
        # The uncertain-call projection is kept in the same transaction as every append, whoever
        # appends (the agent, an import, recovery itself), so it is registered as soon as Django loads.
        from recovery.decision_log import DECISION_TYPES, recovery_decisions_log
        from recovery.projection import RELEVANT, projection_apply, projection_rider, projection_statement
        from runs.store import projector_register

        # Only appends that carry a type the projection reads pay for a transaction around them.
        projector_register(projection_apply, types=RELEVANT, statement=projection_statement, rider=projection_rider)
        # One JSON log line per recovery decision, logged when its append commits.
        projector_register(recovery_decisions_log, types=DECISION_TYPES)
        # How long each tool's reads may be trusted when a run is resumed (the policies' fresh_for).
        from recovery.selectors import fresh_for_by_tool
        from runs.freshness import fresh_for_register

        fresh_for_register(fresh_for_by_tool)
        # The values of sensitive fields are chained as salted commitments (runs.canonical), so
        # that a masked evidence bundle still verifies.
        from recovery.masking import sealed_fields
        from runs.canonical import sealed_names_provider_set

        sealed_names_provider_set(sealed_fields)
