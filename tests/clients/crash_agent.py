"""An agent that imports only the agent client and the standard library: a ledger
correction, run in a fresh environment where Django is not installed.

It can pause at three points, named by RECKON_FAULT_AT: ``model_call`` (the "model" is
thinking, nothing recorded yet), ``tool_execution`` (the start is recorded, the effect not made) and
``after_effect`` (the effect is made, its completion not recorded). On reaching it, it writes
RECKON_FAULT_FILE and waits to be killed. Prints one JSON line; exit 0 finished, 3 uncertain.
"""

import argparse
import json
import os
import sys
import time
import urllib.request

from reckon_client import CallUncertain, open_run, tool

CORRECTION = {"tenant": "acme", "account": "C-771", "amount": 840, "currency": "EUR", "period": "2026-Q3"}


def pause(point: str) -> None:
    if os.environ.get("RECKON_FAULT_AT") == point:
        with open(os.environ["RECKON_FAULT_FILE"], "w") as f:
            f.write(point)
        while True:
            time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--effect-url", required=True)
    parser.add_argument("--ttl", type=float, default=30.0)
    parser.add_argument("--retry-uncertain", action="store_true")
    opts = parser.parse_args()

    @tool(retry_uncertain=opts.retry_uncertain)
    def post_correction(tenant, account, amount, currency, period, *, idempotency_key):
        pause("tool_execution")
        body = json.dumps({"tenant": tenant, "account": account, "amount": amount, "currency": currency, "period": period}).encode()
        req = urllib.request.Request(opts.effect_url, data=body, method="POST", headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key})
        with urllib.request.urlopen(req, timeout=5) as resp:
            result = json.loads(resp.read())
        pause("after_effect")
        return result

    with open_run(opts.run_id, ttl=opts.ttl, tenant="acme") as run:  # RECKON_URL, RECKON_TOKEN
        pause("model_call")
        try:
            result = post_correction(**CORRECTION)
        except CallUncertain as exc:
            print(json.dumps({"status": "uncertain", "epoch": run.epoch, "idempotency_key": exc.idempotency_key}))
            return 3
        run.finish(outcome="corrected")
        print(json.dumps({"status": "finished", "epoch": run.epoch, "result": result, "django": "django" in sys.modules}))
        return 0


if __name__ == "__main__":
    sys.exit(main())
