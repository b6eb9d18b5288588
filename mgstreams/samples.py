"""Sample data: seeded money transfers, as the demo and `mgstreams kafka produce --sample transfers` make them.

The payloads are what the `transfers.transfer` transformation
(query_modules/transfers.py) reads: {"transfer_id", "from", "to", "amount",
"currency", "ts"}.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

CURRENCIES = (("EUR", 50), ("USD", 30), ("GBP", 15), ("CHF", 5))
FIRST_TS = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Transfer:
    transfer_id: str
    source: str
    target: str
    amount: float
    currency: str
    ts: datetime

    def payload(self) -> bytes:
        return json.dumps({"transfer_id": self.transfer_id, "from": self.source, "to": self.target,
                           "amount": self.amount, "currency": self.currency,
                           "ts": self.ts.strftime("%Y-%m-%dT%H:%M:%SZ")}, separators=(",", ":")).encode()


def generate_transfers(seed: int, count: int, accounts: int) -> list[Transfer]:
    """Seeded transfers: a few busy accounts (payroll, merchants) and a long tail; amounts
    log-normal in the sender's home currency; Poisson arrivals, about three a minute."""
    rng = random.Random(seed)
    ids = [f"acc-{i:04d}" for i in range(1, accounts + 1)]
    weights = [1 / (rank ** 0.8) for rank in range(1, accounts + 1)]
    rng.shuffle(weights)
    names, shares = [name for name, _ in CURRENCIES], [share for _, share in CURRENCIES]
    home = {account: rng.choices(names, shares)[0] for account in ids}
    ts = FIRST_TS
    out = []
    for i in range(count):
        source = rng.choices(ids, weights)[0]
        target = source
        while target == source:
            target = rng.choices(ids, weights)[0]
        amount = max(1.0, round(rng.lognormvariate(4.0, 1.2), 2))
        ts += timedelta(seconds=round(rng.expovariate(1 / 20), 3))
        out.append(Transfer(f"t-{i + 1:06d}", source, target, amount, home[source], ts))
    return out
