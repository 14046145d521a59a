"""``manage.py snapshot_plan --events N --recoveries R --objective-ms M``: a snapshot interval's costs from measured ones (docs/schema-versions.md)."""

import json

from django.core.management.base import BaseCommand, CommandError

from runs.snapshot_plan import plan_compute, plan_measure


def _positive_int(name):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise CommandError(f"{name} must be a whole number >= 1, got {text!r}") from None
        if value < 1:
            raise CommandError(f"{name} must be a whole number >= 1, got {text!r}")
        return value

    return parse


def _number(name, *, positive):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise CommandError(f"{name} must be a number, got {text!r}") from None
        if value != value or value in (float("inf"), float("-inf")) or value < 0 or (positive and value == 0):
            raise CommandError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {text!r}")
        return value

    return parse


def _ms(x):
    return f"{x / 1000:,.2f} s" if x >= 1000 else f"{x:,.1f} ms"


class Command(BaseCommand):
    help = (
        "Measure replay cost per event and snapshot write cost on the configured database (in a transaction "
        "that is rolled back), then print the cost of full replays, the cost with snapshots every K events, "
        "the break-even recovery rate and the largest K whose worst-case tail meets the objective."
    )

    def add_arguments(self, parser):
        parser.add_argument("--events", required=True, metavar="N", help="events per run")
        parser.add_argument("--recoveries", required=True, metavar="R", help="expected recoveries per run (may be a fraction)")
        parser.add_argument("--objective-ms", required=True, metavar="M", help="worst-case recovery objective, milliseconds")
        parser.add_argument("--interval", metavar="K", help="price this interval (default: the largest K meeting the objective)")
        parser.add_argument("--measure-events", metavar="N", help="size of the measured run (default: N, at most 20,000)")
        parser.add_argument("--replay-ms-per-event", metavar="C", help="skip measuring: use this replay cost per event")
        parser.add_argument("--snapshot-ms", metavar="S", help="skip measuring: use this snapshot write cost")
        parser.add_argument("--json", action="store_true", help="print the plan as JSON")

    def handle(self, *args, **o):
        events = _positive_int("--events")(o["events"])
        recoveries = _number("--recoveries", positive=False)(o["recoveries"])
        objective = _number("--objective-ms", positive=True)(o["objective_ms"])
        interval = _positive_int("--interval")(o["interval"]) if o["interval"] is not None else None
        measure_events = _positive_int("--measure-events")(o["measure_events"]) if o["measure_events"] is not None else min(events, 20_000)
        if measure_events < 2:
            raise CommandError("--measure-events must be at least 2 (a run_started and one event)")
        given_c = _number("--replay-ms-per-event", positive=True)(o["replay_ms_per_event"]) if o["replay_ms_per_event"] is not None else None
        given_s = _number("--snapshot-ms", positive=False)(o["snapshot_ms"]) if o["snapshot_ms"] is not None else None
        load_ms, where = None, "given"
        if given_c is None or given_s is None:
            m = plan_measure(events=max(measure_events, 2))
            load_ms, where = m.snapshot_load_ms, f"measured on {m.engine} with a {m.events:,}-event run"
            given_c = m.replay_ms_per_event if given_c is None else given_c
            given_s = m.snapshot_write_ms if given_s is None else given_s
        plan = plan_compute(
            events=events, recoveries=recoveries, objective_ms=objective, replay_ms_per_event=given_c,
            snapshot_write_ms=given_s, interval=interval, snapshot_load_ms=load_ms,
        )  # fmt: skip
        plan.measured_on = where
        if o["json"]:
            self.stdout.write(json.dumps(plan.as_dict(), indent=2))
            return
        say = self.stdout.write
        say(f"inputs: N={events:,} events, R={recoveries:g} recoveries per run, objective {objective:g} ms")
        say(f"costs ({where}): replay c={given_c:.4f} ms/event, snapshot write s={given_s:.2f} ms" + (f", snapshot load {load_ms:.2f} ms" if load_ms is not None else ""))
        say(f"full replay per recovery (N/2*c):        {_ms(plan.full_replay_ms_per_recovery)}")
        say(f"full replays per run (R*N/2*c):          {_ms(plan.full_replays_ms)}")
        if plan.max_interval is None:
            say("largest K meeting the objective:         any (replay costs nothing measurable)")
        else:
            say(f"largest K meeting the objective:         {plan.max_interval:,} (worst-case tail {plan.max_interval - 1:,} events = {_ms((plan.max_interval - 1) * given_c)})")
            if plan.max_interval >= events:
                say("  a full replay of this run already meets the objective: snapshots are not needed for latency")
        if plan.max_interval_with_load is not None:
            say(f"  leaving room for the snapshot load:    {plan.max_interval_with_load:,}" if plan.max_interval_with_load else "  leaving room for the snapshot load:    none (loading alone exceeds the objective)")
        ch = plan.chosen
        say(f"with snapshots every K={ch.interval:,} (ceil(N/K)*s + R*K/2*c): {_ms(ch.with_snapshots_ms)} ({ch.snapshots_per_run} writes), saving {_ms(ch.saving_ms)}")
        be = "never (no saving per recovery)" if ch.break_even_recoveries is None else f"{ch.break_even_recoveries:.3f} recoveries per run"
        say(f"break-even recovery rate at K={ch.interval:,}:   {be}")
        verdict = "pay off" if ch.break_even_recoveries is not None and recoveries > ch.break_even_recoveries else "do not pay off"
        say(f"at R={recoveries:g}, snapshots every {ch.interval:,} events {verdict}; worst-case tail {_ms(ch.worst_case_tail_ms)} {'meets' if ch.meets_objective else 'misses'} the objective")
        say("")
        say(f"{'K':>8} {'writes':>7} {'with snapshots':>15} {'saving':>12} {'break-even R':>13} {'worst tail':>12}  objective")
        for row in plan.table:
            be = "-" if row.break_even_recoveries is None else f"{row.break_even_recoveries:.3f}"
            say(f"{row.interval:>8,} {row.snapshots_per_run:>7} {_ms(row.with_snapshots_ms):>15} {_ms(row.saving_ms):>12} {be:>13} {_ms(row.worst_case_tail_ms):>12}  {'meets' if row.meets_objective else 'misses'}")
