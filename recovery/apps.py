from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    verbose_name = "Recovery"

    def ready(self) -> None:
        # The uncertain-call projection is kept in the same transaction as every append, whoever
        # appends (the agent, an import, recovery itself), so it is added as soon as Django loads;
        # the decision log after it (both in the order of runs.rules.ORDER).
        from recovery import projection_forms
        from recovery.decision_log import DECISION_TYPES, recovery_decisions_log
        from runs.rules import ReadModelRule, rule_add

        # Only appends that carry a type the projection reads pay for a transaction around them.
        rule_add(projection_forms.RULE)
        # The reports' roll-up of recorded calls (recovery.recorded), kept by every append that starts a call.
        from recovery import recorded

        rule_add(recorded.RULE)
        # One JSON log line per recovery decision, logged when its append commits.
        rule_add(ReadModelRule("decision log", DECISION_TYPES, recovery_decisions_log))
        # How long each tool's reads may be trusted when a run is resumed (the policies' fresh_for).
        from recovery.selectors import fresh_for_by_tool
        from runs.freshness import fresh_for_register

        fresh_for_register(fresh_for_by_tool)
        # The values of sensitive fields are chained as salted commitments (runs.canonical), so
        # that a masked evidence bundle still verifies.
        from recovery.masking import sealed_fields
        from runs.canonical import sealed_names_provider_set

        sealed_names_provider_set(sealed_fields)
