import os
from reckon_client import open_run, tool
from ledger_tools import ledger  # the examples' ledger service (examples/ledger.py)

@tool
def post_correction(account: str, amount: int, *, idempotency_key: str) -> dict:
    return ledger.post(account, amount, idempotency_key=idempotency_key)  # the side effect

with open_run(url=os.environ["RECKON_URL"], token=os.environ["RECKON_TOKEN"]) as run:
    print(run.run_id, post_correction(account="C-771", amount=840))
    run.finish()
