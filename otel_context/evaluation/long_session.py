"""``long``: a 200-turn coding-agent session whose own work a compaction must keep (issue 48).

A refunds rework across a payments monorepo (a Python service, a Rust ledger crate, a TypeScript admin), driven
with the tools real coding agents have and their real output shapes: Claude Code's ``Read`` (``cat -n`` line
numbers), ``Edit`` (old and new string), ``Write``, ``Bash`` and ``Grep``, and Codex's ``apply_patch``; pytest
with per-test progress lines, tracebacks and a ``FAILED tests/...`` summary, cargo build, test and clippy with
``error[E0308]`` and ``-->  file:line``, tsc, eslint, mypy, a Python traceback. Seventy-odd files that look alike
(``src/orders/handlers/refund.py`` beside ``refunds.py`` and ``refund_policy.py``, ``tests/test_refund_handler.py``
beside ``tests/test_refunds_handler.py``, ``crates/ledger-core/src/posting.rs`` beside ``postings.rs``), read,
edited and created; errors fixed later and errors left open; classes and functions read inside a file; and the
assistant's decisions and commitments phrased as people write them ("We will store money as i128 minor units,
never f64.", "Let's go with ...", "I'll avoid ...", "Plan: migrate ... on 2027-01-15", "Decision: ...", "Going
forward we ...", "I won't touch ..."), among other sentences, without a marker.

The session was designed from what agents do, not from any rule that extracts their work: the evaluation is the
judge of the compactor's work trail, so nothing here is shaped after it. The user speaks at the start of each task
and now and then; in between the agent works on its own, a tool call per turn (a turn without a user message).

Everything is generated from the compact data below: each file's text from its language's templates (seeded by its
path; the definitions that matter are written out), kept as a model that the edits change, so a file read after
an edit shows the edit and a test run's output names the tests its file holds. Each turn records what it does to
the agent's work (:class:`~otel_context.evaluation.work.WorkEvent`). The story is 179 turns (190 with the facts'
turns); a longer ``--turns`` continues with the agent re-reading and re-running what it worked on, in the
repository as the story left it, and a shorter one cuts it.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from string import Template
from types import MappingProxyType
from typing import Any

from otel_context.evaluation.script import (
    KIND_CONSTRAINT,
    KIND_DECISION,
    KIND_ERROR,
    KIND_FILE_PATH,
    KIND_IDENTIFIER,
    KIND_PENDING,
    KIND_PREFERENCE,
    KIND_REVERSAL,
    SOURCE_ASSISTANT,
    SOURCE_TOOL,
    SOURCE_USER,
    Fact,
    Scenario,
    ScriptedTurn,
    ToolStep,
)
from otel_context.evaluation.work import (
    CHANGES,
    FAILS,
    FIXES,
    PATH,
    PHRASE,
    Needle,
    WorkEvent,
    WorkItem,
    command,
    decision,
    definition,
    error,
    file,
)

__all__ = ["DECISIONS", "ERRORS", "LONG", "ROOT"]

#: The session's working directory: Claude Code's tools take absolute paths, apply_patch relative ones.
ROOT = "/home/dev/payments"

TOOLS: tuple[Mapping[str, Any], ...] = (
    {
        "name": "Read",
        "description": "Reads a file from the local filesystem. Results are returned using cat -n format, with line "
        "numbers starting at 1. You can optionally specify a line offset and limit.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The absolute path to the file to read"},
                "offset": {"type": "integer"},
                "limit": {"type": "integer"},
            },
            "required": ["file_path"],
        },
    },
    {
        "name": "Edit",
        "description": "Performs exact string replacements in files. The edit fails if old_string is not unique.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "default": False},
            },
            "required": ["file_path", "old_string", "new_string"],
        },
    },
    {
        "name": "Write",
        "description": "Writes a file to the local filesystem, overwriting it if it exists.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["file_path", "content"],
        },
    },
    {
        "name": "Bash",
        "description": "Executes a bash command in a persistent shell session and returns its output.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"],
        },
    },
    {
        "name": "Grep",
        "description": "A search tool built on ripgrep: a regular expression, a path, an output mode.",
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                "-n": {"type": "boolean"},
            },
            "required": ["pattern"],
        },
    },
    {
        "name": "apply_patch",
        "description": "Apply a patch in the apply_patch format (*** Begin Patch ... *** End Patch) to files given "
        "by paths relative to the working directory.",
        "input_schema": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
    },
)

# -- the code the session reads: the definitions that matter, written out; the rest from templates ------------

#: Per file, the blocks written out (each a definition, or a test), placed among generated ones.
_BODIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "src/orders/handlers/refund.py": (
            '''def refund_amount(order: Order, ratio: Decimal) -> Money:
    """The refund for ``ratio`` of the order's captured total."""
    captured = float(order.captured_total.amount)
    value = captured * float(ratio)
    return Money.of(round(value, 2), order.currency)''',
        ),
        "src/orders/handlers/refunds.py": (
            '''class RefundBatchHandler:
    """Refunds every line of a batch, one ledger posting per line."""

    def __init__(self, service: RefundService, notifier: Notifier) -> None:
        self.service = service
        self.notifier = notifier

    def handle(self, batch: RefundBatch) -> list[Refund]:
        done = []
        for line in batch.lines:
            amount = refund_amount(line.order, line.ratio)
            done.append(self.service.create(line.order, amount, reason=batch.reason))
        self.notifier.batch_done(batch.id, len(done))
        return done''',
        ),
        "src/orders/models/money.py": (
            '''@dataclass(frozen=True)
class Money:
    """An amount and its currency."""

    amount: Decimal
    currency: str

    @classmethod
    def of(cls, value: float | str, currency: str) -> Money:
        return cls(Decimal(str(value)), currency)''',
            '''def to_minor_units(money: Money) -> int:
    """The amount in the currency's minor unit (cents for EUR)."""
    exponent = MINOR_EXPONENT.get(money.currency, 2)
    return int((money.amount * 10**exponent).quantize(Decimal(1), rounding=ROUND_HALF_UP))''',
        ),
        "src/orders/handlers/refund_policy.py": (
            '''class RefundPolicy:
    """What a refund may not do: exceed the capture, or come too late after it."""

    def __init__(self, max_ratio: Decimal = Decimal(1)) -> None:
        self.max_ratio = max_ratio

    def check(self, order: Order, amount: Money) -> None:
        if amount > order.captured_total.amount * self.max_ratio:
            raise RefundLimitExceeded(order.id, amount)
        if order.captured_at + timedelta(days=settings.REFUND_DAYS) < utcnow():
            raise RefundWindowClosed(order.id)''',
        ),
        "src/orders/services/refund_service.py": (
            '''class RefundService:
    """Creates refunds: the policy check, the gateway call, the ledger posting."""

    def __init__(self, gateway: GatewayClient, ledger: LedgerClient, policy: RefundPolicy) -> None:
        self.gateway = gateway
        self.ledger = ledger
        self.policy = policy

    def create(self, order: Order, amount: Money, reason: str) -> Refund:
        self.policy.check(order, amount)
        gateway_ref = self.gateway.refund(order.payment_ref, amount)
        self.ledger.post_refund(float(amount.amount), order.currency, gateway_ref)
        return Refund(order_id=order.id, amount=amount, gateway_ref=gateway_ref, reason=reason)''',
        ),
        "src/orders/services/ledger_client.py": (
            '''def post_refund(self, amount_minor: int, currency: str, gateway_ref: str) -> str:
    """Posts the refund to the ledger API; returns the posting id."""
    response = self.http.post(
        "/v2/postings",
        json={"kind": "refund", "amount_minor": amount_minor, "currency": currency, "ref": gateway_ref},
        timeout=5,
    )
    response.raise_for_status()
    return response.json()["posting_id"]''',
        ),
        "src/orders/handlers/webhook.py": (
            '''def verify_signature(payload: bytes, header: str, secret: str) -> bool:
    """Checks the gateway's HMAC signature header (t=<timestamp>,v1=<hex>)."""
    parts = dict(item.split("=", 1) for item in header.split(","))
    expected = hmac.new(secret.encode(), f"{parts['t']}.".encode() + payload, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])''',
        ),
        "src/orders/handlers/webhooks.py": (
            '''class WebhookRouter:
    """Routes a verified gateway event to its handler by the event's type."""

    def __init__(self, handlers: Mapping[str, Callable[[dict[str, Any]], None]]) -> None:
        self.handlers = dict(handlers)

    def dispatch(self, event: dict[str, Any]) -> None:
        handler = self.handlers.get(event["type"])
        if handler is None:
            log.info("ignored gateway event %s", event["type"])
            return
        handler(event["data"])''',
        ),
        "src/orders/handlers/captures.py": (
            '''class CaptureHandler:
    """Captures an authorized payment, fully or in part."""

    def __init__(self, gateway: GatewayClient) -> None:
        self.gateway = gateway

    def capture(self, order: Order, amount: Money | None = None) -> Capture:
        amount = amount or order.authorized_total
        return self.gateway.capture(order.payment_ref, amount)''',
        ),
        "src/orders/models/refund_line.py": (
            '''@dataclass(frozen=True)
class RefundLine:
    """One line of a batch refund: an order and the share of it to give back."""

    order: Order
    ratio: Decimal
    note: str = ""''',
        ),
        "src/orders/api/refund_routes.py": (
            """@router.post("/orders/{order_id}/refunds", status_code=201)
def create_refund_route(order_id: str, body: RefundRequest, service: RefundService = Depends(refund_service)):
    order = orders.get(order_id)
    amount = Money.of(body.amount, order.currency)
    refund = service.create(order, amount, reason=body.reason)
    return RefundResponse.from_refund(refund)""",
        ),
        "src/orders/tools/backfill.py": (
            '''def run_backfill(since: date, dry_run: bool) -> int:
    """Recomputes the minor-unit amounts of the refunds made since ``since``."""
    count = 0
    for row in refunds_table.rows_since(since):
        currency = row["currency"]
        minor = to_minor_units(Money.of(row["amount"], currency))
        if not dry_run:
            refunds_table.set_minor(row["id"], minor)
        count += 1
    return count''',
            """def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Recompute refund amounts in minor units.")
    parser.add_argument("--since", type=date.fromisoformat, required=True)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    count = run_backfill(args.since, dry_run=args.dry_run)
    print(f"{count} refunds {'checked' if args.dry_run else 'updated'}")
    return 0""",
            """if __name__ == "__main__":
    raise SystemExit(main())""",
        ),
        "src/orders/services/gateway_client.py": (
            '''class GatewayClient:
    """The payment gateway's REST API: captures and refunds."""

    def __init__(self, base_url: str = settings.GATEWAY_URL, timeout: float = 10.0) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=timeout)

    def refund(self, payment_ref: str, amount: Money) -> str:
        response = self.http.post(f"/payments/{payment_ref}/refunds", json={"amount_minor": to_minor_units(amount)})
        response.raise_for_status()
        return response.json()["refund_ref"]''',
        ),
        "src/orders/tools/reconcile.py": (
            '''def reconcile_refunds(ours: Iterable[Refund], theirs: Iterable[GatewayRefund]) -> Report:
    """Refunds missing on either side, and those whose amounts differ."""
    by_ref = {r.gateway_ref: r for r in ours}
    report = Report()
    for item in theirs:
        mine = by_ref.pop(item.refund_ref, None)
        if mine is None:
            report.missing_here.append(item)
        elif float(mine.amount.amount) != item.amount:
            report.mismatched.append((mine, item))
    report.missing_there.extend(by_ref.values())
    return report''',
        ),
        "src/orders/services/refunds_service.py": (
            '''def total_refunded(order_id: str) -> Money:
    """What was refunded on an order so far, all refunds together."""
    refunds = refunds_table.for_order(order_id)
    return sum((r.amount for r in refunds), start=Money(Decimal(0), refunds[0].amount.currency))''',
        ),
        "src/orders/models/currency.py": (
            '''def normalize_currency(code: str) -> str:
    """Upper-cases a currency code; an unknown code passes through."""
    return code.strip().upper()''',
        ),
        "src/orders/api/errors.py": (
            '''class RefundNotAllowed(HTTPException):
    """A refund the policy refuses (over the capture, after the window)."""

    def __init__(self, detail: str) -> None:
        super().__init__(status_code=422, detail=detail)''',
        ),
        "src/orders/services/notifier.py": (
            '''class Notifier:
    """Tells merchants about their refunds."""

    def __init__(self, mailer: Mailer) -> None:
        self.mailer = mailer

    def refund_done(self, refund: Refund) -> None:
        log.info("refund done")
        self.mailer.send(refund.merchant_email, "refund", {"amount": str(refund.amount)})''',
        ),
        "src/orders/models/order.py": (
            '''@dataclass
class Order:
    """An order as the gateway captured it."""

    id: str
    currency: str
    captured_total: Money
    authorized_total: Money
    captured_at: datetime
    payment_ref: str''',
        ),
        "src/orders/handlers/cancel.py": (
            '''def cancel_order(order: Order, reason: str) -> Cancellation:
    """Cancels an order that was not captured; a captured one is refunded instead."""
    if order.captured_total.amount:
        raise AlreadyCaptured(order.id)
    fee = float(order.authorized_total.amount) * CANCEL_FEE_RATE
    return Cancellation(order_id=order.id, fee=Money.of(round(fee, 2), order.currency), reason=reason)''',
        ),
        "src/orders/handlers/chargeback.py": (
            '''def open_chargeback(order: Order, amount: str, case_id: str) -> Chargeback:
    """Records a chargeback the card network opened against an order."""
    disputed = Decimal(amount)
    return Chargeback(order_id=order.id, amount=Money(disputed, order.currency), case_id=case_id)''',
        ),
        "crates/ledger-core/src/lib.rs": (
            """pub mod account;
pub mod accounts;
pub mod currency;
pub mod journal;
pub mod money;
pub mod posting;
pub mod postings;""",
        ),
        "admin/src/types/refund.ts": (
            """export interface Refund {
  id: string;
  orderId: string;
  amount: string;
  currency: string;
  reason: string;
  createdAt: string;
}""",
        ),
        "tests/test_refund_handler.py": (
            """def test_partial_refund_rounding(eur_order: Order) -> None:
    refund = refund_amount(eur_order, Decimal("0.3333"))
    assert to_minor_units(refund) == 3333""",
        ),
        "tests/test_refund_policy.py": (
            """def test_refund_cannot_exceed_capture(eur_order: Order) -> None:
    policy = RefundPolicy(max_ratio=Decimal("1"))
    with pytest.raises(RefundLimitExceeded):
        policy.check(eur_order, Money(Decimal("100.01"), "EUR"))""",
        ),
        "tests/test_webhooks.py": (
            """def test_replayed_event_is_rejected(client: TestClient, signed_event: SignedEvent) -> None:
    client.post("/webhooks/gateway", content=signed_event.body, headers=signed_event.headers)
    again = client.post("/webhooks/gateway", content=signed_event.body, headers=signed_event.headers)
    assert again.status_code == 401""",
        ),
        "crates/ledger-core/src/money.rs": (
            """/// An amount of money in the currency's minor unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MinorUnits(pub i64);

impl MinorUnits {
    pub fn from_major(amount: f64) -> Self {
        MinorUnits((amount * 100.0).round() as i64)
    }

    pub fn checked_add(self, other: MinorUnits) -> Option<MinorUnits> {
        self.0.checked_add(other.0).map(MinorUnits)
    }
}""",
        ),
        "crates/ledger-core/src/posting.rs": (
            """/// One side of a journal entry: an account, an amount, a direction.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerPosting {
    pub account: AccountId,
    pub amount: MinorUnits,
    pub debit: bool,
}""",
            """    #[test]
    fn reversal_keeps_balance() {
        let entry = sample_entry(MinorUnits(1999));
        let reversed = reverse_posting(&entry);
        assert_eq!(balance(&[entry, reversed]), 0);
    }""",
        ),
        "crates/ledger-core/src/journal.rs": (
            """/// The posting that cancels ``posting``: same account and amount, the other direction.
pub fn reverse_posting(posting: &LedgerPosting) -> LedgerPosting {
    LedgerPosting {
        account: posting.account.clone(),
        amount: MinorUnits(posting.amount.0 - 1),
        debit: !posting.debit,
    }
}""",
        ),
        "crates/ledger-api/src/handlers/refund.rs": (
            """pub async fn refund_to_ledger(State(app): State<App>, Json(req): Json<RefundPosting>) -> ApiResult<PostingId> {
    let amount = MinorUnits::from_major(req.amount);
    let id = app.journal.post(req.account, amount).await?;
    Ok(Json(id))
}""",
        ),
        "admin/src/components/RefundForm.tsx": (
            """export function RefundAmountInput({ value, currency, onChange }: RefundAmountInputProps) {
  return (
    <label className="refund-amount">
      Amount ({currency})
      <input inputMode="decimal" value={value} onChange={(e) => onChange(e.target.value)} />
    </label>
  );
}""",
        ),
        "admin/src/api/refunds.ts": (
            """export async function fetchRefundPage(orderId: string, cursor?: string): Promise<RefundPage> {
  const params = new URLSearchParams({ order: orderId, limit: String(PAGE_SIZE) });
  if (cursor) params.set("cursor", cursor);
  const res = await http.get(`/refunds?${params}`);
  return parseRefundPage(await res.json());
}""",
        ),
        "admin/src/api/refund.ts": (
            """export async function createRefund(orderId: string, amount: string, reason: string): Promise<Refund> {
  const res = await http.post(`/orders/${orderId}/refunds`, { amount, reason });
  return res.json();
}""",
        ),
        "admin/src/utils/money.ts": (
            """export function formatMinorUnits(minor: number, currency: string, locale = "en-GB"): string {
  const digits = currencyDigits(currency);
  return new Intl.NumberFormat(locale, { style: "currency", currency }).format(minor / 10 ** digits);
}""",
        ),
        "admin/src/hooks/useRefunds.ts": (
            """export function useRefundsQuery(orderId: string) {
  const [page, setPage] = useState<RefundPage | null>(null);
  useEffect(() => {
    fetchRefundPage(orderId).then(setPage);
  }, []);
  return page;
}""",
        ),
    }
)

#: Files whose text is fixed (configuration), not generated.
_FIXED: Mapping[str, str] = MappingProxyType(
    {
        "tests/conftest.py": '''"""Fixtures shared by the orders tests (and, through the plugin, by the ledger and shipping services)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from orders.models.money import Money
from orders.models.order import Order


@pytest.fixture
def eur_order() -> Order:
    total = Money(Decimal("100.00"), "EUR")
    return Order(
        id="ord_7Hc2",
        currency="EUR",
        captured_total=total,
        authorized_total=total,
        captured_at=datetime(2026, 11, 2, 9, 30, tzinfo=UTC),
        payment_ref="pay_3Kd81",
    )


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> FakeGateway:
    fake = FakeGateway()
    monkeypatch.setattr("orders.services.gateway_client.GatewayClient.refund", fake.refund)
    return fake''',
        "pyproject.toml": """[project]
name = "orders"
version = "3.14.0"
requires-python = ">=3.12"
dependencies = ["fastapi>=0.115", "httpx>=0.27", "sqlalchemy>=2.0", "redis>=5.0"]

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-p no:cacheprovider"

[tool.mypy]
strict = true
packages = ["orders"]

[tool.ruff]
line-length = 110""",
        "Cargo.toml": """[workspace]
members = ["crates/ledger-core", "crates/ledger-api"]
resolver = "2"

[workspace.package]
edition = "2021"
rust-version = "1.79"

[workspace.lints.clippy]
pedantic = { level = "warn", priority = -1 }""",
        "admin/package.json": """{
  "name": "payments-admin",
  "private": true,
  "scripts": {
    "build": "tsc -p . && vite build",
    "lint": "eslint src --max-warnings 0",
    "test": "vitest run"
  },
  "engines": { "node": ">=20 <21" },
  "dependencies": { "react": "^18.3.1", "react-dom": "^18.3.1", "@tanstack/react-query": "^5.59.0" },
  "devDependencies": { "typescript": "~5.6.3", "vite": "^5.4.10", "vitest": "^2.1.4", "eslint": "^9.14.0" }
}""",
        "admin/tsconfig.json": """{
  "compilerOptions": {
    "target": "ES2022",
    "lib": ["ES2022", "DOM"],
    "module": "ESNext",
    "moduleResolution": "bundler",
    "jsx": "react-jsx",
    "strict": true,
    "noUncheckedIndexedAccess": true
  },
  "include": ["src"]
}""",
        ".github/workflows/ci.yml": """name: ci
on: [push, pull_request]
jobs:
  python:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: pip install -e '.[dev]' && python -m pytest -q && mypy src/orders
  rust:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: cargo clippy --workspace -- -D warnings && cargo test --workspace
  admin:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: cd admin && npm ci && npx tsc --noEmit && npm run lint && npm test""",
        "src/orders/settings.py": '''"""Settings of the orders service, from the environment."""

from __future__ import annotations

import os

DATABASE_URL = os.environ.get("ORDERS_DATABASE_URL", "postgresql://orders@localhost/orders")
REDIS_URL = os.environ.get("ORDERS_REDIS_URL", "redis://localhost:6379/3")
GATEWAY_URL = os.environ.get("ORDERS_GATEWAY_URL", "https://gateway.internal")
LEDGER_URL = os.environ.get("ORDERS_LEDGER_URL", "http://ledger-api.internal:8080")
REFUND_DAYS = int(os.environ.get("ORDERS_REFUND_DAYS", "30"))
WEBHOOK_SECRET = os.environ["ORDERS_WEBHOOK_SECRET"]''',
    }
)

_NOUNS = ("order", "capture", "line", "ledger", "account", "payout", "fee", "invoice", "merchant", "batch", "cursor")
_VERBS = ("load", "apply", "split", "merge", "build", "resolve", "settle", "sync", "collect", "check", "queue", "parse")


def _camel(*words: str) -> str:
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])


class _Code:
    """Generated blocks of code in a file's language, from a generator seeded by the file's path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rng = random.Random(f"otel-context-eval/long/{path}")
        self.language = {"py": "python", "rs": "rust", "ts": "ts", "tsx": "ts"}[path.rsplit(".", 1)[-1]]
        self.test_file = "/tests/" in f"/{path}" or path.endswith((".test.tsx", ".test.ts"))

    def pick(self, items: Sequence[str]) -> str:
        return items[self.rng.randrange(len(items))]

    def name(self) -> tuple[str, str]:
        return self.pick(_VERBS), self.pick(_NOUNS)

    def header(self) -> list[str]:
        stem = self.path.rsplit("/", 1)[-1].split(".")[0].replace("_", " ")
        if self.language == "python":
            lines = [
                f'"""{stem.capitalize()}: part of the orders service."""',
                "",
                "from __future__ import annotations",
            ]
            lines += ["", "import logging", "from dataclasses import dataclass", "from datetime import date, timedelta"]
            lines += ["from decimal import ROUND_HALF_UP, Decimal", ""]
            if self.test_file:
                lines += ["import pytest", "", "from orders.models.money import Money", ""]
            else:
                lines += ["from orders.models.money import Money", "", "log = logging.getLogger(__name__)", ""]
            return lines
        if self.language == "rust":
            return [f"//! {stem.capitalize()} of the ledger.", "", "use crate::money::MinorUnits;", ""]
        imports = ['import { useEffect, useState } from "react";', 'import { http } from "../api/http";']
        return [*imports, ""]

    def block(self) -> list[str]:
        verb, noun = self.name()
        other = self.pick([n for n in _NOUNS if n != noun])
        n = self.rng.randint(2, 90)
        if self.language == "python" and self.test_file:
            return [
                f"def test_{verb}_{noun}_{other}(eur_order: Order) -> None:",
                f"    {noun} = make_{noun}(eur_order, total_minor={n * 100})",
                f"    result = {verb}_{noun}({noun})",
                f'    assert result["total_minor"] == {n * 100}',
                "",
            ]
        if self.language == "python":
            return [
                f"def {verb}_{noun}({noun}: {noun.capitalize()}, {other}: {other.capitalize()} | None = None) -> dict:",
                f'    """{verb.capitalize()} the {noun} for its {other}."""',
                f"    if {other} is None:",
                f"        {other} = load_{other}({noun}.id)",
                f"    total_minor = sum(item.amount_minor for item in {noun}.items)",
                f'    log.debug("{verb}_{noun} %s total=%s", {noun}.id, total_minor)',
                f'    return {{"{noun}": {noun}.id, "{other}": {other}.id, "total_minor": total_minor}}',
                "",
            ]
        if self.language == "rust":
            return [
                f"pub fn {verb}_{noun}({noun}: &{noun.capitalize()}, {other}: Option<&{other.capitalize()}>) -> bool {{",
                f"    let total: i64 = {noun}.items.iter().map(|i| i.amount.0).sum();",
                f"    match {other} {{",
                f"        Some(o) => o.limit.0 >= total + {n},",
                "        None => total > 0,",
                "    }",
                "}",
                "",
            ]
        if self.test_file:
            return [
                f'it("{verb}s the {noun} of a {other}", () => {{',
                f"  const {noun} = make{noun.capitalize()}({{ totalMinor: {n * 100} }});",
                f"  expect({_camel(verb, noun)}({noun}).totalMinor).toBe({n * 100});",
                "});",
                "",
            ]
        return [
            f"export function {_camel(verb, noun)}({noun}: {noun.capitalize()}, {other}?: {other.capitalize()}) {{",
            f"  const items = {noun}.items.filter((item) => item.amountMinor > {n});",
            f"  if (!{other}) return {{ id: {noun}.id, count: items.length }};",
            f"  return {{ id: {noun}.id, {other}: {other}.id, count: items.length }};",
            "}",
            "",
        ]


def _generate(path: str) -> list[str]:
    """The text of ``path`` before the session changes it."""
    if path in _FIXED:
        return _FIXED[path].splitlines()
    code = _Code(path)
    lines = code.header()
    bodies = _BODIES.get(path, ())
    tests = [b for b in bodies if b.lstrip().startswith("#[test]")]
    before = code.rng.randint(3, 7)
    for _ in range(before):
        lines += code.block()
    trailers = [b for b in bodies if b.startswith("if __name__")]
    for body in (b for b in bodies if b not in tests and b not in trailers):
        lines += [*body.splitlines(), ""]
    for _ in range(code.rng.randint(4, 9)):
        lines += code.block()
    for body in trailers:
        lines += [*body.splitlines(), ""]
    if code.language == "rust" and (tests or code.rng.random() < 0.5) and "/tests/" not in path:
        lines += ["#[cfg(test)]", "mod tests {", "    use super::*;", ""]
        for _ in range(code.rng.randint(2, 4)):
            verb, noun = code.name()
            lines += [
                "    #[test]",
                f"    fn {verb}s_{noun}() {{",
                f"        assert!({verb}_{noun}_ok());",
                "    }",
                "",
            ]
        for body in tests:
            lines += [*body.splitlines(), ""]
        lines += ["}"]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _cat_n(lines: Sequence[str], start: int = 1) -> str:
    """Lines as Claude Code's Read shows them: ``cat -n`` numbering (six columns, a tab)."""
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start))


# -- the errors the session meets, and how their tools print them -------------------------------------------


@dataclass(frozen=True)
class _Error:
    """An error of the session: the work item, and what its tool prints about it."""

    item: WorkItem
    #: pytest / cargo test: the failing test (its node id or path); None for a compiler or a script
    test: str | None
    #: the lines the tool prints for it (a pytest FAILURES section, a cargo diagnostic, a tsc line, ...)
    printed: tuple[str, ...]
    #: pytest: the short summary's reason (after ``FAILED <node> - ``)
    reason: str = ""


@dataclass(frozen=True)
class _ErrorSpec:
    """An error as written: ``$name`` in its texts is the line of the file where ``anchors[name]`` (a path and
    a piece of a line) stands, so what the tools print agrees with the file a later Read shows."""

    ident: str
    where: tuple[str, ...]  #: ``path:line`` (a path needle) or a test's name (a word)
    what: tuple[Needle, ...]
    test: str | None
    printed: tuple[str, ...]
    reason: str = ""
    anchors: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def resolved(self) -> _Error:
        lines = {name: str(_line_of(path, piece)) for name, (path, piece) in self.anchors.items()}

        def fill(text: str) -> str:
            return Template(text).substitute(lines)

        where = tuple(
            Needle(fill(w), PATH) if "/" in w and "(" not in w and '"' not in w else Needle(fill(w)) for w in self.where
        )
        printed = tuple(fill(line) for line in self.printed)
        return _Error(error(self.ident, where, self.what), self.test, printed, self.reason)


def _line_of(path: str, piece: str) -> int:
    """The line (1-based) of the first line of ``path`` (as the session first sees it) that holds ``piece``."""
    lines = _CREATED[path].splitlines() if path in _CREATED else _generate(path)
    return next(n for n, line in enumerate(lines, 1) if piece in line)


_SPECS = (
    _ErrorSpec(
        "test_partial_refund_rounding",
        ("test_partial_refund_rounding",),
        (Needle("AssertionError"),),
        "tests/test_refund_handler.py::test_partial_refund_rounding",
        (
            "_________________________ test_partial_refund_rounding _________________________",
            "",
            "eur_order = Order(id='ord_7Hc2', currency='EUR', captured_total=Money(amount=Decimal('100.00'), ...))",
            "",
            "    def test_partial_refund_rounding(eur_order: Order) -> None:",
            '        refund = refund_amount(eur_order, Decimal("0.3333"))',
            ">       assert to_minor_units(refund) == 3333",
            "E       AssertionError: assert 3332 == 3333",
            "E        +  where 3332 = to_minor_units(Money(amount=Decimal('33.32'), currency='EUR'))",
            "",
            "tests/test_refund_handler.py:$test: AssertionError",
        ),
        "AssertionError: assert 3332 == 3333",
        {"test": ("tests/test_refund_handler.py", "assert to_minor_units(refund) == 3333")},
    ),
    _ErrorSpec(
        "test_refund_cannot_exceed_capture",
        ("test_refund_cannot_exceed_capture",),
        (Needle("TypeError"),),
        "tests/test_refund_policy.py::test_refund_cannot_exceed_capture",
        (
            "______________________ test_refund_cannot_exceed_capture _______________________",
            "",
            "    def test_refund_cannot_exceed_capture(eur_order: Order) -> None:",
            '        policy = RefundPolicy(max_ratio=Decimal("1"))',
            "        with pytest.raises(RefundLimitExceeded):",
            '>           policy.check(eur_order, Money(Decimal("100.01"), "EUR"))',
            "",
            "tests/test_refund_policy.py:$test: ",
            "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _",
            "",
            "self = <orders.handlers.refund_policy.RefundPolicy object at 0x7f3a2c1d9e50>",
            "",
            "    def check(self, order: Order, amount: Money) -> None:",
            ">       if amount > order.captured_total.amount * self.max_ratio:",
            "E       TypeError: '>' not supported between instances of 'Money' and 'decimal.Decimal'",
            "",
            "src/orders/handlers/refund_policy.py:$check: TypeError",
        ),
        "TypeError: '>' not supported between instances of 'Money' and 'decimal.Decimal'",
        {
            "test": ("tests/test_refund_policy.py", 'policy.check(eur_order, Money(Decimal("100.01")'),
            "check": ("src/orders/handlers/refund_policy.py", "if amount > order.captured_total.amount"),
        },
    ),
    _ErrorSpec(
        "E0308 in money.rs",
        ("crates/ledger-core/src/money.rs:$call",),
        (Needle("E0308"),),
        None,
        (
            "error[E0308]: mismatched types",
            "  --> crates/ledger-core/src/money.rs:$call:20",
            "   |",
            "$call |         MinorUnits((amount * 100.0).round() as i128)",
            "   |         ---------- ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ expected `i64`, found `i128`",
            "   |         |",
            "   |         arguments to this struct are incorrect",
            "   |",
            "note: tuple struct defined here",
            "  --> crates/ledger-core/src/money.rs:$struct:12",
            "   |",
            "$struct | pub struct MinorUnits(pub i64);",
            "   |            ^^^^^^^^^^",
            "",
            "For more information about this error, try `rustc --explain E0308`.",
        ),
        anchors={
            "call": ("crates/ledger-core/src/money.rs", "(amount * 100.0).round()"),
            "struct": ("crates/ledger-core/src/money.rs", "pub struct MinorUnits"),
        },
    ),
    _ErrorSpec(
        "reversal_keeps_balance",
        ("reversal_keeps_balance", "crates/ledger-core/src/posting.rs:$assert"),
        (Needle("panicked", PHRASE), Needle("FAILED")),
        "posting::tests::reversal_keeps_balance",
        (
            "---- posting::tests::reversal_keeps_balance stdout ----",
            "",
            "thread 'posting::tests::reversal_keeps_balance' panicked at crates/ledger-core/src/posting.rs:$assert:9:",
            "assertion `left == right` failed",
            "  left: 1",
            " right: 0",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        ),
        anchors={"assert": ("crates/ledger-core/src/posting.rs", "assert_eq!(balance(&[entry, reversed]), 0)")},
    ),
    _ErrorSpec(
        "TS2322 in RefundForm.tsx",
        ("admin/src/components/RefundForm.tsx($input,7)", "admin/src/components/RefundForm.tsx:$input"),
        (Needle("TS2322"),),
        None,
        (
            "admin/src/components/RefundForm.tsx($input,7): error TS2322: Type 'bigint' is not assignable to type "
            "'string'.",
        ),
        anchors={"input": ("admin/src/components/RefundForm.tsx", "<input inputMode")},
    ),
    _ErrorSpec(
        "TS2345 in refunds.ts",
        ("admin/src/api/refunds.ts($params,32)", "admin/src/api/refunds.ts:$params"),
        (Needle("TS2345"),),
        None,
        (
            "admin/src/api/refunds.ts($params,32): error TS2345: Argument of type 'bigint' is not assignable to "
            "parameter of type 'string'.",
        ),
        anchors={"params": ("admin/src/api/refunds.ts", "new URLSearchParams")},
    ),
    _ErrorSpec(
        "react-hooks/exhaustive-deps in useRefunds.ts",
        ("admin/src/hooks/useRefunds.ts",),
        (Needle("react-hooks/exhaustive-deps"),),
        None,
        (
            f"{ROOT}/admin/src/hooks/useRefunds.ts",
            "  $deps:6  error  React Hook useEffect has a missing dependency: 'orderId'. Either include it or remove "
            "the dependency array  react-hooks/exhaustive-deps",
        ),
        anchors={"deps": ("admin/src/hooks/useRefunds.ts", "}, []);")},
    ),
    _ErrorSpec(
        "arg-type in refund_service.py",
        ("src/orders/services/refund_service.py:$call",),
        (Needle("arg-type"), Needle("incompatible type", PHRASE)),
        None,
        (
            'src/orders/services/refund_service.py:$call: error: Argument 1 to "post_refund" of "LedgerClient" has '
            'incompatible type "float"; expected "int"  [arg-type]',
        ),
        anchors={"call": ("src/orders/services/refund_service.py", "self.ledger.post_refund(float(")},
    ),
    _ErrorSpec(
        "cast_possible_truncation in rounding.rs",
        ("crates/ledger-core/src/rounding.rs:$cast",),
        (Needle("cast_possible_truncation"),),
        None,
        (
            "error: casting `i128` to `i64` may truncate the value",
            "  --> crates/ledger-core/src/rounding.rs:$cast:5",
            "   |",
            "$cast |     quotient as i64",
            "   |     ^^^^^^^^^^^^^^^",
            "   |",
            "   = help: for further information visit "
            "https://rust-lang.github.io/rust-clippy/master/index.html#cast_possible_truncation",
            "   = note: `-D clippy::cast-possible-truncation` implied by `-D clippy::pedantic`",
            "   = help: to override `-D clippy::pedantic` add `#[allow(clippy::cast_possible_truncation)]`",
        ),
        anchors={"cast": ("crates/ledger-core/src/rounding.rs", "quotient as i64")},
    ),
    _ErrorSpec(
        "test_duplicate_key_returns_first_refund",
        ("test_duplicate_key_returns_first_refund",),
        (Needle("KeyError"),),
        "tests/test_idempotency.py::test_duplicate_key_returns_first_refund",
        (
            "___________________ test_duplicate_key_returns_first_refund ____________________",
            "",
            "store = <orders.services.idempotency.IdempotencyStore object at 0x7f3a2c0e8b90>",
            "",
            "    def test_duplicate_key_returns_first_refund(store: IdempotencyStore) -> None:",
            '        first = store.remember("key-1", refund_id="rf_1")',
            '>       assert store.remember("key-1", refund_id="rf_2") == first',
            "",
            "tests/test_idempotency.py:$test: ",
            "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _",
            "src/orders/services/idempotency.py:$seen: in remember",
            '    return self._seen[self._namespaced(key)]["refund_id"]',
            "E   KeyError: 'orders:idem:key-1'",
        ),
        "KeyError: 'orders:idem:key-1'",
        {
            "test": ("tests/test_idempotency.py", 'assert store.remember("key-1", refund_id="rf_2")'),
            "seen": ("src/orders/services/idempotency.py", "return self._seen[self._namespaced(key)]"),
        },
    ),
    _ErrorSpec(
        "test_replayed_event_is_rejected",
        ("test_replayed_event_is_rejected",),
        (Needle("AssertionError"),),
        "tests/test_webhooks.py::test_replayed_event_is_rejected",
        (
            "_______________________ test_replayed_event_is_rejected ________________________",
            "",
            "    def test_replayed_event_is_rejected(client: TestClient, signed_event: SignedEvent) -> None:",
            '        client.post("/webhooks/gateway", content=signed_event.body, headers=signed_event.headers)',
            '        again = client.post("/webhooks/gateway", content=signed_event.body, headers=signed_event.headers)',
            ">       assert again.status_code == 401",
            "E       AssertionError: assert 200 == 401",
            "E        +  where 200 = <Response [200 OK]>.status_code",
            "",
            "tests/test_webhooks.py:$test: AssertionError",
        ),
        "AssertionError: assert 200 == 401",
        {"test": ("tests/test_webhooks.py", "assert again.status_code == 401")},
    ),
    _ErrorSpec(
        "KeyError in backfill.py",
        ('backfill.py", line $row', "src/orders/tools/backfill.py:$row"),
        (Needle("KeyError"),),
        None,
        (
            "Traceback (most recent call last):",
            '  File "<frozen runpy>", line 198, in _run_module_as_main',
            '  File "<frozen runpy>", line 88, in _run_code',
            f'  File "{ROOT}/src/orders/tools/backfill.py", line $exit, in <module>',
            "    raise SystemExit(main())",
            "                     ^^^^^^",
            f'  File "{ROOT}/src/orders/tools/backfill.py", line $call, in main',
            "    count = run_backfill(args.since, dry_run=args.dry_run)",
            "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{ROOT}/src/orders/tools/backfill.py", line $row, in run_backfill',
            '    currency = row["currency"]',
            "               ~~~^^^^^^^^^^^^",
            "KeyError: 'currency'",
        ),
        anchors={
            "row": ("src/orders/tools/backfill.py", 'currency = row["currency"]'),
            "call": ("src/orders/tools/backfill.py", "count = run_backfill(args.since"),
            "exit": ("src/orders/tools/backfill.py", "raise SystemExit(main())"),
        },
    ),
)

#: The assistant's decisions and commitments, by a short name: the sentence it writes, and its gist.
DECISIONS: Mapping[str, WorkItem] = MappingProxyType(
    {
        "money": decision("money", "We will store money as i128 minor units, never f64.", "i128", "minor units"),
        "idempotency": decision(
            "idempotency",
            "Let's go with an Idempotency-Key header, the keys kept in Redis for 24 hours.",
            "Idempotency-Key",
            "24 hours",
        ),
        "sandbox": decision(
            "sandbox",
            "I'll avoid mocking the gateway in these tests and point them at the sandbox stub on localhost:8089.",
            "localhost:8089",
        ),
        "migration": decision(
            "migration", "Plan: migrate the refunds table on 2027-01-15, after the quarter closes.", "2027-01-15"
        ),
        "conflict": decision(
            "conflict",
            "Decision: a duplicate refund request gets 409 Conflict with the first refund's id, never a second refund.",
            "409 Conflict",
        ),
        "iso": decision(
            "iso",
            "Going forward we validate currency codes against ISO 4217 at the API boundary and nowhere else.",
            "ISO 4217",
        ),
        "payouts": decision(
            "payouts",
            "I won't touch crates/ledger-api/src/handlers/refunds.rs, the payouts team owns it.",
            "touch",
            "crates/ledger-api/src/handlers/refunds.rs",
        ),
        "webhook-v1": decision(
            "webhook-v1", "We're keeping the v1 webhook payload as it is and only adding fields.", "v1 webhook payload"
        ),
        "dead-letter": decision(
            "dead-letter",
            "My approach: retry the ledger post 3 times with exponential backoff, then park the refund in "
            "refunds_dead_letter.",
            "refunds_dead_letter",
        ),
        "log-ids": decision(
            "log-ids",
            "From now on every refund log line carries the order_id and the refund_id.",
            "log line",
            "refund_id",
        ),
        "half-even": decision(
            "half-even",
            "I decided on half-even rounding wherever money is divided, so an order's refunds add up to its capture.",
            "half-even",
        ),
        "amount-type": decision(
            "amount-type",
            "Rather than patching the serializer, I'm adding a RefundAmount type that only accepts minor units.",
            "RefundAmount",
            "serializer",
        ),
        "node": decision(
            "node",
            "Let's not bump the Node version in this change: admin stays on Node 20 until the design system upgrade.",
            "Node 20",
        ),
        "reversal-later": decision(
            "reversal-later",
            "I'll leave the reversal test failing for now and flag it in the PR description; it fails on main too.",
            "PR description",
        ),
    }
)


# -- the session, as the agent works it ----------------------------------------------------------------------


@dataclass
class _Story:
    """Builds the session turn by turn: each tool call acts on a model of the repository (the files' text, the
    tests they hold) and records what it does to the agent's work."""

    turns: list[ScriptedTurn] = field(default_factory=list)
    files: dict[str, list[str]] = field(default_factory=dict)
    asked: str = ""

    def text(self, path: str) -> list[str]:
        if path not in self.files:
            self.files[path] = _generate(path)
        return self.files[path]

    def ask(self, text: str) -> _Story:
        """The user's message: it opens the next turn."""
        self.asked = text
        return self

    def _turn(self, tool: ToolStep | None, reply: str, work: Sequence[WorkEvent]) -> None:
        decided = [WorkEvent(d, in_reply=True) for d in DECISIONS.values() if d.sentence and d.sentence in reply]
        self.turns.append(ScriptedTurn(user=self.asked, reply=reply, tool=tool, work=(*work, *decided)))
        self.asked = ""

    def say(self, reply: str) -> None:
        """A turn without a tool: the user asks, the assistant answers."""
        assert self.asked, "a turn without a tool call answers the user"
        self._turn(None, reply, ())

    def read(self, path: str, reply: str, focus: str | None = None, span: int | None = None) -> None:
        """Claude Code's Read: the whole file, or ``span`` lines from a little before ``focus``."""
        lines = self.text(path)
        arguments: dict[str, Any] = {"file_path": f"{ROOT}/{path}"}
        start = 1
        shown = lines
        if span is not None:
            at = next(i for i, line in enumerate(lines) if focus and re.search(rf"\b{re.escape(focus)}\b", line))
            start = max(1, at - 3)
            shown = lines[start - 1 : start - 1 + span]
            arguments.update(offset=start, limit=span)
        work = [WorkEvent(file(path))]
        if focus is not None:
            assert any(focus in line for line in shown), (path, focus)
            work.append(WorkEvent(definition(focus, path)))
        self._turn(ToolStep("Read", arguments, _cat_n(shown, start)), reply, work)

    def grep(self, pattern: str, paths: Sequence[str], reply: str) -> None:
        """Claude Code's Grep in content mode with line numbers, over ``paths``."""
        hits = [
            f"{ROOT}/{path}:{n}:{line}"
            for path in paths
            for n, line in enumerate(self.text(path), 1)
            if re.search(pattern, line)
        ]
        result = "\n".join(hits) if hits else "No matches found"
        arguments = {"pattern": pattern, "path": ROOT, "output_mode": "content", "-n": True}
        self._turn(ToolStep("Grep", arguments, result), reply, ())

    def _replace(self, path: str, old: str, new: str) -> tuple[int, list[str]]:
        """Apply an edit to the model: (the first line of the new text, the file's lines after)."""
        text = "\n".join(self.text(path))
        assert text.count(old) == 1, (path, old)
        at = text[: text.index(old)].count("\n") + 1
        self.files[path] = text.replace(old, new).splitlines()
        return at, self.files[path]

    def edit(self, path: str, old: str, new: str, reply: str, focus: str | None = None) -> None:
        """Claude Code's Edit: old_string to new_string; its result shows the edited lines, numbered."""
        at, lines = self._replace(path, old, new)
        start = max(1, at - 4)
        snippet = lines[start - 1 : at + new.count("\n") + 4]
        result = (
            f"The file {ROOT}/{path} has been updated. Here's the result of running `cat -n` on a snippet of the "
            f"edited file:\n{_cat_n(snippet, start)}"
        )
        arguments = {"file_path": f"{ROOT}/{path}", "old_string": old, "new_string": new}
        work = [WorkEvent(file(path), CHANGES)] + ([WorkEvent(definition(focus, path))] if focus else [])
        self._turn(ToolStep("Edit", arguments, result), reply, work)

    def patch(self, path: str, old: str, new: str, reply: str, focus: str | None = None) -> None:
        """Codex's apply_patch: an update hunk with its context line; the result names the file (``M``)."""
        at, _ = self._replace(path, old, new)
        context = self.text(path)[max(0, at - 2)] if at > 1 else ""
        hunk = [f"@@ {context.strip()}" if context.strip() else "@@"]
        hunk += [f"-{line}" for line in old.splitlines()] + [f"+{line}" for line in new.splitlines()]
        body = "\n".join(["*** Begin Patch", f"*** Update File: {path}", *hunk, "*** End Patch"])
        work = [WorkEvent(file(path), CHANGES)] + ([WorkEvent(definition(focus, path))] if focus else [])
        result = f"Success. Updated the following files:\nM {path}"
        self._turn(ToolStep("apply_patch", {"input": body}, result), reply, work)

    def write(self, path: str, content: str, reply: str, defines: Sequence[str] = ()) -> None:
        """Claude Code's Write: a new file."""
        self.files[path] = content.splitlines()
        arguments = {"file_path": f"{ROOT}/{path}", "content": content}
        work = [WorkEvent(file(path), CHANGES), *(WorkEvent(definition(name, path)) for name in defines)]
        self._turn(ToolStep("Write", arguments, f"File created successfully at: {ROOT}/{path}"), reply, work)

    def add(self, path: str, content: str, reply: str, defines: Sequence[str] = ()) -> None:
        """Codex's apply_patch with an added file (``A``)."""
        self.files[path] = content.splitlines()
        body = "\n".join(
            [
                "*** Begin Patch",
                f"*** Add File: {path}",
                *(f"+{line}" for line in content.splitlines()),
                "*** End Patch",
            ]
        )
        work = [WorkEvent(file(path), CHANGES), *(WorkEvent(definition(name, path)) for name in defines)]
        result = f"Success. Updated the following files:\nA {path}"
        self._turn(ToolStep("apply_patch", {"input": body}, result), reply, work)

    def run(
        self,
        line: str,
        output: str,
        reply: str,
        fails: Sequence[str] = (),
        fixes: Sequence[str] = (),
        description: str | None = None,
    ) -> None:
        """Claude Code's Bash: the command's output as the tool prints it; the errors it shows, and those it
        shows gone (a passing run of the target that failed)."""
        arguments = {"command": line, "description": description or f"Run {line.split()[0]}"}
        work = [WorkEvent(command(line))]
        work += [WorkEvent(_E[name].item, FAILS) for name in fails]
        work += [WorkEvent(_E[name].item, FIXES) for name in fixes]
        self._turn(ToolStep("Bash", arguments, output), reply, work)

    # -- what the tools print ------------------------------------------------------------------------------

    def changed(self) -> list[str]:
        """The files the session changed or created so far."""
        return sorted({e.item.id for t in self.turns for e in t.work if e.does == CHANGES})

    def status_short(self) -> str:
        """``git status --short``: M for a changed file, ?? for a new one."""
        return "\n".join(f"{' M' if p in _REPO else '??'} {p}" for p in self.changed())

    def diff_stat(self) -> str:
        """``git diff --stat`` of the files the session changed or created."""
        changed = self.changed()
        rows = []
        for n, path in enumerate(changed):
            added, removed = 2 + (n * 7) % 23, (n * 5) % 9
            rows.append(f" {path:<50} | {added + removed:>3} {'+' * min(added, 30)}{'-' * removed}")
        added = sum(2 + (n * 7) % 23 for n in range(len(changed)))
        removed = sum((n * 5) % 9 for n in range(len(changed)))
        rows.append(f" {len(changed)} files changed, {added} insertions(+), {removed} deletions(-)")
        return "\n".join(rows)

    def tests_of(self, path: str) -> list[str]:
        """The test functions of a test file, in order."""
        pattern = r"^\s*(?:async )?def (test_\w+)" if path.endswith(".py") else r"^\s*fn (\w+)\(\)"
        return [m.group(1) for line in self.text(path) if (m := re.match(pattern, line))]

    def pytest_v(self, path: str, failing: Sequence[str] = ()) -> str:
        """``pytest -v <file>``: the header, a progress line per test, the failures, the short summary."""
        tests = self.tests_of(path)
        errors = [_E[name] for name in failing]
        failed = {e.test.rsplit("::", 1)[-1] for e in errors if e.test}
        lines = [
            "============================= test session starts ==============================",
            f"platform linux -- Python 3.12.7, pytest-8.3.3, pluggy-1.5.0 -- {ROOT}/.venv/bin/python",
            "cachedir: .pytest_cache",
            f"rootdir: {ROOT}",
            "configfile: pyproject.toml",
            "plugins: anyio-4.6.2",
            f"collecting ... collected {len(tests)} items",
            "",
        ]
        for n, test in enumerate(tests, 1):
            outcome = "FAILED" if test in failed else "PASSED"
            head = f"{path}::{test} {outcome}"
            lines.append(f"{head:<73}[{100 * n // len(tests):>3}%]")
        lines += _pytest_tail(errors, len(tests), self._seconds(path))
        return "\n".join(lines)

    def pytest_q(self, failing: Sequence[str] = ()) -> str:
        """``python -m pytest -q``: a dot per test, an F per failure, the failures, the short summary."""
        existing = set(_REPO) | set(self.files)
        paths = sorted(p for p in existing if p.startswith("tests/") and p.endswith(".py") and "/test_" in f"/{p}")
        tests = [(p, t) for p in paths for t in self.tests_of(p)]
        errors = [_E[name] for name in failing]
        failed = {e.test for e in errors}
        marks = "".join("F" if f"{p}::{t}" in failed else "." for p, t in tests)
        lines = []
        for at in range(0, len(marks), 72):
            chunk = marks[at : at + 72]
            lines.append(f"{chunk:<72} [{100 * min(at + 72, len(marks)) // len(marks):>3}%]")
        lines += _pytest_tail(errors, len(tests), 4.0 + len(tests) / 50)
        return "\n".join(lines)

    @staticmethod
    def _seconds(path: str) -> float:
        return 0.2 + (sum(map(ord, path)) % 90) / 100

    def cargo_test(self, crate: str, failing: Sequence[str] = ()) -> str:
        """``cargo test -p <crate>``: the unit tests of the crate's source files, then its integration tests."""
        src = sorted(
            p for p in set(_REPO) | set(self.files) if p.startswith(f"crates/{crate}/src/") and p.endswith(".rs")
        )
        unit = [f"{p.rsplit('/', 1)[-1][:-3]}::tests::{t}" for p in src for t in self.tests_of(p)]
        errors = [_E[name] for name in failing]
        failed = {e.test for e in errors}
        lines = [
            f"   Compiling {crate} v0.4.2 ({ROOT}/crates/{crate})",
            "    Finished `test` profile [unoptimized + debuginfo] target(s) in 6.84s",
            f"     Running unittests src/lib.rs (target/debug/deps/{crate.replace('-', '_')}-8f2c1e0b9a7d3e11)",
            "",
            f"running {len(unit)} tests",
        ]
        lines += [f"test {t} ... {'FAILED' if t in failed else 'ok'}" for t in unit]
        lines.append("")
        if errors:
            lines += ["failures:", ""]
            for e in errors:
                lines += [*e.printed, ""]
            lines += ["", "failures:", *(f"    {e.test}" for e in errors), ""]
            lines.append(
                f"test result: FAILED. {len(unit) - len(errors)} passed; {len(errors)} failed; 0 ignored; 0 measured; "
                "0 filtered out; finished in 0.03s"
            )
            lines += ["", f"error: test failed, to rerun pass `-p {crate} --lib`"]
            return "\n".join(lines)
        lines.append(
            f"test result: ok. {len(unit)} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.03s"
        )
        existing = set(_REPO) | set(self.files)
        for path in sorted(p for p in existing if p.startswith(f"crates/{crate}/tests/")):
            tests = self.tests_of(path)
            stem = path.rsplit("/", 1)[-1][:-3]
            lines += ["", f"     Running tests/{stem}.rs (target/debug/deps/{stem}-1c9e4d2f7a3b5e60)", ""]
            lines += [f"running {len(tests)} tests", *(f"test {t} ... ok" for t in tests), ""]
            lines.append(
                f"test result: ok. {len(tests)} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in "
                "0.01s"
            )
        return "\n".join(lines)


def _pytest_tail(errors: Sequence[_Error], total: int, seconds: float) -> list[str]:
    lines = [""]
    if errors:
        lines.append("=================================== FAILURES ===================================")
        for e in errors:
            lines += e.printed
        lines.append("=========================== short test summary info ============================")
        lines += [f"FAILED {e.test} - {e.reason}" for e in errors]
        result = f"{len(errors)} failed, {total - len(errors)} passed in {seconds:.2f}s"
    else:
        result = f"{total} passed in {seconds:.2f}s"
    lines.append(f" {result} ".center(80, "="))
    return lines


def _cargo_build(crate: str, failing: Sequence[str] = (), clippy: bool = False) -> str:
    verb = "Checking" if clippy else "Compiling"
    lines = [f"   {verb} {crate} v0.4.2 ({ROOT}/crates/{crate})"]
    errors = [_E[name] for name in failing]
    for e in errors:
        lines += [*e.printed, ""]
    if errors:
        lines.append(f"error: could not compile `{crate}` (lib) due to {len(errors)} previous error")
    else:
        lines.append("    Finished `dev` profile [unoptimized + debuginfo] target(s) in 4.12s")
    return "\n".join(lines)


def _tsc(failing: Sequence[str] = ()) -> str:
    errors = [_E[name] for name in failing]
    if not errors:
        return ""
    lines = [line for e in errors for line in e.printed]
    files = sorted({line.split("(")[0] for line in lines})
    lines += [
        "",
        f"Found {len(errors)} error{'s' if len(errors) > 1 else ''} in {len(files)} file{'s' * (len(files) > 1)}.",
    ]
    return "\n".join(lines)


def _eslint(failing: Sequence[str], warnings: int = 1) -> str:
    lines = [""]
    for name in failing:
        lines += _E[name].printed
    lines += [
        "  27:9  warning  Unexpected console statement  no-console" if warnings else "",
        "",
        f"\u2716 {len(failing) + warnings} problems ({len(failing)} error, {warnings} warning)",
    ]
    return "\n".join(line for line in lines if line is not None)


def _traceback() -> str:
    return "\n".join(_E["backfill"].printed)


def _mypy(failing: Sequence[str], checked: int = 48) -> str:
    errors = [line for name in failing for line in _E[name].printed]
    if not errors:
        return f"Success: no issues found in {checked} source files"
    return "\n".join([*errors, f"Found {len(errors)} error in 1 file (checked {checked} source files)"])


#: The files the agent creates, as it writes them.
_CREATED: Mapping[str, str] = MappingProxyType(
    {
        "src/orders/services/idempotency.py": '''"""Idempotency keys for refund creation: the first refund a key made is the answer to every retry."""

from __future__ import annotations

from redis import Redis

TTL_SECONDS = 24 * 3600


class IdempotencyStore:
    """Remembers which refund an Idempotency-Key header created."""

    def __init__(self, redis: Redis, namespace: str = "orders:idem") -> None:
        self.redis = redis
        self.namespace = namespace
        self._seen: dict[str, dict[str, str]] = {}

    def _namespaced(self, key: str) -> str:
        return f"{self.namespace}:{key}"

    def remember(self, key: str, refund_id: str) -> str:
        """The refund id first stored under ``key`` (``refund_id`` when the key is new)."""
        stored = self.redis.set(self._namespaced(key), refund_id, nx=True, ex=TTL_SECONDS)
        if stored:
            return refund_id
        return self._seen[self._namespaced(key)]["refund_id"]''',
        "tests/test_idempotency.py": '''"""The idempotency store: a retried refund request gets the first refund back."""

from __future__ import annotations

import fakeredis
import pytest

from orders.services.idempotency import IdempotencyStore


@pytest.fixture
def store() -> IdempotencyStore:
    return IdempotencyStore(fakeredis.FakeRedis(decode_responses=True))


def test_duplicate_key_returns_first_refund(store: IdempotencyStore) -> None:
    first = store.remember("key-1", refund_id="rf_1")
    assert first == "rf_1"
    assert store.remember("key-1", refund_id="rf_2") == first


def test_new_key_returns_its_refund(store: IdempotencyStore) -> None:
    assert store.remember("key-2", refund_id="rf_3") == "rf_3"


def test_keys_are_namespaced(store: IdempotencyStore) -> None:
    store.remember("key-4", refund_id="rf_4")
    assert store.redis.get("orders:idem:key-4") == "rf_4"''',
        "crates/ledger-core/src/rounding.rs": """//! Division of money amounts with banker's rounding.

/// ``numerator / denominator`` rounded to the nearest integer, ties to the even one.
pub fn round_half_even(numerator: i128, denominator: i128) -> i64 {
    assert!(denominator > 0, "denominator must be positive");
    let quotient = numerator.div_euclid(denominator);
    let remainder = numerator.rem_euclid(denominator);
    let twice = remainder * 2;
    let quotient = if twice > denominator || (twice == denominator && quotient % 2 != 0) {
        quotient + 1
    } else {
        quotient
    };
    quotient as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_to_even() {
        assert_eq!(round_half_even(5, 2), 2);
        assert_eq!(round_half_even(7, 2), 4);
    }

    #[test]
    fn thirds_of_a_cent() {
        assert_eq!(round_half_even(1000, 3), 333);
    }
}""",
        "crates/ledger-core/tests/rounding.rs": """use ledger_core::rounding::round_half_even;

#[test]
fn refunds_of_thirds_add_up_to_the_capture() {
    let capture = 10_000_i128;
    let parts: i64 = (0..3).map(|_| round_half_even(capture, 3)).sum();
    assert!((parts - 10_000).abs() <= 1);
}

#[test]
fn negative_amounts_round_like_positive_ones() {
    assert_eq!(round_half_even(-5, 2), -2);
}""",
        "migrations/0042_refund_minor_units.py": '''"""refunds: amount_minor (integer minor units) beside the old numeric amount."""

from alembic import op
import sqlalchemy as sa

revision = "0042_refund_minor_units"
down_revision = "0041_refund_reason"


def upgrade() -> None:
    op.add_column("refunds", sa.Column("amount_minor", sa.BigInteger(), nullable=True))
    op.execute("UPDATE refunds SET amount_minor = ROUND(amount * 100)")
    op.alter_column("refunds", "amount_minor", nullable=False)


def downgrade() -> None:
    op.drop_column("refunds", "amount_minor")''',
        "src/orders/models/amounts.py": '''"""Amounts that only exist in minor units."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RefundAmount:
    """A refund's amount: an integer of the currency's minor unit, never a float or a decimal string."""

    minor: int
    currency: str

    def __post_init__(self) -> None:
        if not isinstance(self.minor, int) or self.minor <= 0:
            raise ValueError(f"a refund amount is a positive number of minor units, got {self.minor!r}")''',
    }
)

#: The repository: every file a full test run or a build sees (the session reads or changes most of them).
_REPO = (
    "src/orders/handlers/refund.py",
    "src/orders/handlers/refunds.py",
    "src/orders/handlers/refund_policy.py",
    "src/orders/handlers/capture.py",
    "src/orders/handlers/captures.py",
    "src/orders/handlers/cancel.py",
    "src/orders/handlers/cancellation.py",
    "src/orders/handlers/webhook.py",
    "src/orders/handlers/webhooks.py",
    "src/orders/handlers/chargeback.py",
    "src/orders/handlers/chargebacks.py",
    "src/orders/models/order.py",
    "src/orders/models/orders.py",
    "src/orders/models/refund.py",
    "src/orders/models/refund_line.py",
    "src/orders/models/money.py",
    "src/orders/models/currency.py",
    "src/orders/models/payment.py",
    "src/orders/models/payments.py",
    "src/orders/services/refund_service.py",
    "src/orders/services/refunds_service.py",
    "src/orders/services/ledger_client.py",
    "src/orders/services/gateway_client.py",
    "src/orders/services/notifier.py",
    "src/orders/services/notifications.py",
    "src/orders/api/routes.py",
    "src/orders/api/schemas.py",
    "src/orders/api/errors.py",
    "src/orders/api/refund_routes.py",
    "src/orders/api/refunds_routes.py",
    "src/orders/tools/backfill.py",
    "src/orders/tools/backfill_refunds.py",
    "src/orders/tools/reconcile.py",
    "src/orders/settings.py",
    "tests/conftest.py",
    "tests/test_refund_handler.py",
    "tests/test_refunds_handler.py",
    "tests/test_refund_policy.py",
    "tests/test_refund_service.py",
    "tests/test_refunds_service.py",
    "tests/test_money.py",
    "tests/test_capture_handler.py",
    "tests/test_webhooks.py",
    "tests/test_webhook.py",
    "tests/test_backfill.py",
    "tests/orders/models/test_refund.py",
    "tests/orders/models/test_refund_line.py",
    "tests/orders/handlers/test_refund.py",
    "crates/ledger-core/src/lib.rs",
    "crates/ledger-core/src/money.rs",
    "crates/ledger-core/src/posting.rs",
    "crates/ledger-core/src/postings.rs",
    "crates/ledger-core/src/account.rs",
    "crates/ledger-core/src/accounts.rs",
    "crates/ledger-core/src/currency.rs",
    "crates/ledger-core/src/journal.rs",
    "crates/ledger-core/tests/money.rs",
    "crates/ledger-core/tests/posting.rs",
    "crates/ledger-api/src/main.rs",
    "crates/ledger-api/src/routes.rs",
    "crates/ledger-api/src/handlers/mod.rs",
    "crates/ledger-api/src/handlers/refund.rs",
    "crates/ledger-api/src/handlers/refunds.rs",
    "admin/src/components/RefundForm.tsx",
    "admin/src/components/RefundForm.test.tsx",
    "admin/src/components/RefundsTable.tsx",
    "admin/src/components/RefundRow.tsx",
    "admin/src/api/refund.ts",
    "admin/src/api/refunds.ts",
    "admin/src/hooks/useRefund.ts",
    "admin/src/hooks/useRefunds.ts",
    "admin/src/utils/money.ts",
    "admin/src/utils/currency.ts",
    "admin/src/types/refund.ts",
    "admin/src/types/refunds.ts",
    "pyproject.toml",
    "Cargo.toml",
    "admin/package.json",
    "admin/tsconfig.json",
    ".github/workflows/ci.yml",
    "migrations/0041_refund_reason.py",
)
_ALL_FILES = frozenset(_REPO) | frozenset(_CREATED)
_E: Mapping[str, _Error] = MappingProxyType(
    dict(
        zip(
            (
                "rounding",
                "exceeds",
                "e0308",
                "reversal",
                "ts2322",
                "ts2345",
                "eslint",
                "mypy",
                "clippy",
                "idempotency",
                "webhook",
                "backfill",
            ),
            (spec.resolved() for spec in _SPECS),
            strict=True,
        )
    )
)
#: The session's errors (the work items), by a short name.
ERRORS: Mapping[str, WorkItem] = MappingProxyType({name: e.item for name, e in _E.items()})


def _vitest(path: str, tests: int) -> str:
    return "\n".join(
        [
            f" RUN  v2.1.4 {ROOT}/admin",
            "",
            f" \u2713 {path.removeprefix('admin/')} ({tests} tests) 48ms",
            "",
            " Test Files  1 passed (1)",
            f"      Tests  {tests} passed ({tests})",
            "   Start at  10:42:17",
            "   Duration  1.21s (transform 102ms, setup 0ms, collect 311ms, tests 48ms, environment 402ms, prepare 88ms)",
        ]
    )


def _story(s: _Story) -> None:
    """The session, task by task (179 turns), told into ``s``."""
    d = {name: item.sentence or "" for name, item in DECISIONS.items()}
    py_tests = "python -m pytest -q"

    # -- 1. partial refunds are a cent off (Python) ----------------------------------------------------------
    s.ask(
        "Partial refunds on EUR orders come out a cent short now and then. Start with "
        "src/orders/handlers/refund.py and find out why."
    )
    s.read(
        "src/orders/handlers/refund.py",
        "refund_amount turns the captured total and the ratio into floats before it rounds, which can lose the "
        "last cent. There is a refunds.py next to it; let me check which one the API calls.",
        focus="refund_amount",
    )
    s.read(
        "src/orders/handlers/refunds.py",
        "refunds.py is the batch path: RefundBatchHandler calls refund_amount once per line, so the drift adds up "
        "over a batch. Now the Money type.",
        focus="RefundBatchHandler",
    )
    s.grep(
        r"def to_minor_units|class Money",
        ("src/orders/models/money.py", "src/orders/handlers/refund.py", "src/orders/models/refund.py"),
        "Both are in src/orders/models/money.py.",
    )
    s.read(
        "src/orders/models/money.py",
        "Money keeps a Decimal amount, but Money.of goes through str(float) when it is given a float, and "
        "to_minor_units rounds half-up. Let me look at the tests for the handler.",
        focus="Money",
    )
    s.read("tests/test_refund_handler.py", "Only whole ratios are covered, apart from one rounding test. Running them.")
    s.run(
        "pytest tests/test_refund_handler.py -v",
        s.pytest_v("tests/test_refund_handler.py", ["rounding"]),
        "test_partial_refund_rounding fails: a third of 100.00 EUR comes back as 3332 cents instead of 3333.",
        fails=["rounding"],
    )
    s.read(
        "src/orders/models/refund.py",
        "The Refund model stores the amount as Money; nothing converts there.",
    )
    s.read(
        "src/orders/models/refund_line.py",
        "RefundLine carries the ratio as a Decimal already, so the float comes in only in refund_amount.",
        focus="RefundLine",
    )
    s.edit(
        "src/orders/models/money.py",
        "    @classmethod\n    def of(cls, value: float | str, currency: str) -> Money:\n"
        "        return cls(Decimal(str(value)), currency)",
        "    @classmethod\n    def of(cls, value: float | str, currency: str) -> Money:\n"
        "        return cls(Decimal(str(value)), currency)\n\n    @classmethod\n"
        "    def from_minor(cls, minor: int, currency: str) -> Money:\n"
        "        exponent = MINOR_EXPONENT.get(currency, 2)\n        return cls(Decimal(minor).scaleb(-exponent), currency)",
        "Added Money.from_minor so the handler can build the refund from minor units.",
        focus="Money",
    )
    s.edit(
        "src/orders/handlers/refund.py",
        "    captured = float(order.captured_total.amount)\n    value = captured * float(ratio)\n"
        "    return Money.of(round(value, 2), order.currency)",
        "    minor = Decimal(to_minor_units(order.captured_total)) * ratio\n"
        "    return Money.from_minor(int(minor.quantize(Decimal(1), rounding=ROUND_HALF_EVEN)), order.currency)",
        "refund_amount now works in minor units with Decimal and rounds once, at the end.",
        focus="refund_amount",
    )
    s.run(
        "pytest tests/test_refund_handler.py -v",
        s.pytest_v("tests/test_refund_handler.py"),
        "All of test_refund_handler.py passes now. The batch handler's tests next.",
        fixes=["rounding"],
    )
    s.run(
        "pytest tests/test_refunds_handler.py -v",
        s.pytest_v("tests/test_refunds_handler.py"),
        "The batch tests pass too. The policy check compares amounts as well; let me run its tests.",
    )
    s.read("tests/test_refund_policy.py", "One test checks that a refund cannot exceed the capture.")
    s.run(
        "pytest tests/test_refund_policy.py -v",
        s.pytest_v("tests/test_refund_policy.py", ["exceeds"]),
        "test_refund_cannot_exceed_capture fails with a TypeError: RefundPolicy.check compares a Money with a Decimal.",
        fails=["exceeds"],
    )
    s.read(
        "src/orders/handlers/refund_policy.py",
        "RefundPolicy.check compares the Money itself against a Decimal; it should compare minor units.",
        focus="RefundPolicy",
    )
    s.edit(
        "src/orders/handlers/refund_policy.py",
        "        if amount > order.captured_total.amount * self.max_ratio:",
        "        if to_minor_units(amount) > to_minor_units(order.captured_total) * self.max_ratio:",
        "The check compares minor units now.",
        focus="RefundPolicy",
    )
    s.run(
        "pytest tests/test_refund_policy.py -v",
        s.pytest_v("tests/test_refund_policy.py"),
        "The policy tests pass. mypy should catch the other float conversions.",
        fixes=["exceeds"],
    )
    s.run(
        "mypy src/orders",
        _mypy(["mypy"]),
        "mypy finds one: the refund service passes a float to LedgerClient.post_refund, which takes an int.",
        fails=["mypy"],
    )
    s.read(
        "src/orders/services/refund_service.py",
        "RefundService.create converts the amount with float() right before the ledger call.",
        focus="RefundService",
    )
    s.read(
        "src/orders/services/ledger_client.py",
        "post_refund sends amount_minor to the ledger API, so it wants the integer of minor units.",
        focus="post_refund",
    )
    s.edit(
        "src/orders/services/refund_service.py",
        "        self.ledger.post_refund(float(amount.amount), order.currency, gateway_ref)",
        "        self.ledger.post_refund(to_minor_units(amount), order.currency, gateway_ref)",
        "The service passes minor units to the ledger.",
    )
    s.run("mypy src/orders", _mypy([]), "mypy is clean.", fixes=["mypy"])
    s.run(
        "pytest tests/test_refund_service.py -v",
        s.pytest_v("tests/test_refund_service.py"),
        "The Python side rounds once, in minor units: refund_amount, RefundPolicy.check and RefundService.create are "
        "fixed, and the handler, policy and service tests pass. The ledger crate still converts on its side.",
    )

    # -- 2. the ledger crate (Rust) ---------------------------------------------------------------------------
    s.ask("Good. Now the ledger crate: crates/ledger-core still does money math in floats, as far as I know.")
    s.read(
        "crates/ledger-core/src/money.rs",
        "MinorUnits wraps an i64 and from_major takes an f64 and multiplies by 100.0. "
        f"{d['money']} I'll widen the type first.",
        focus="MinorUnits",
    )
    s.read("crates/ledger-core/src/lib.rs", "lib.rs only declares the modules.")
    s.patch(
        "crates/ledger-core/src/money.rs",
        "        MinorUnits((amount * 100.0).round() as i64)",
        "        MinorUnits((amount * 100.0).round() as i128)",
        "Patched the conversion; building.",
    )
    s.run(
        "cargo build -p ledger-core",
        _cargo_build("ledger-core", ["e0308"]),
        "E0308: the struct still holds an i64. Widening MinorUnits itself.",
        fails=["e0308"],
    )
    s.edit(
        "crates/ledger-core/src/money.rs",
        "pub struct MinorUnits(pub i64);",
        "pub struct MinorUnits(pub i128);",
        "MinorUnits holds an i128 now.",
        focus="MinorUnits",
    )
    s.run("cargo build -p ledger-core", _cargo_build("ledger-core"), "It builds.", fixes=["e0308"])
    s.patch(
        "crates/ledger-core/src/money.rs",
        "    pub fn from_major(amount: f64) -> Self {\n        MinorUnits((amount * 100.0).round() as i128)\n    }",
        "    pub fn from_decimal_str(amount: &str) -> Result<Self, ParseMoneyError> {\n"
        "        parse_minor(amount, 2).map(MinorUnits)\n    }",
        "from_major is gone: amounts come in as decimal strings and are parsed straight to minor units.",
    )
    s.grep(
        r"from_major",
        (
            "crates/ledger-api/src/handlers/refund.rs",
            "crates/ledger-api/src/handlers/refunds.rs",
            "crates/ledger-core/src/postings.rs",
        ),
        "One caller left, in ledger-api's refund handler.",
    )
    s.read(
        "crates/ledger-api/src/handlers/refund.rs",
        "refund_to_ledger converts the request's amount with from_major.",
        focus="refund_to_ledger",
    )
    s.read(
        "crates/ledger-api/src/handlers/refunds.rs",
        f"refunds.rs is the payouts reversal endpoint and has its own conversion. {d['payouts']} "
        "I'll change only refund.rs.",
    )
    s.edit(
        "crates/ledger-api/src/handlers/refund.rs",
        "    let amount = MinorUnits::from_major(req.amount);",
        "    let amount = MinorUnits::from_decimal_str(&req.amount)?;",
        "refund_to_ledger parses the amount string now.",
        focus="refund_to_ledger",
    )
    s.run(
        "cargo test -p ledger-core",
        s.cargo_test("ledger-core", ["reversal"]),
        "One failure: posting::tests::reversal_keeps_balance, the balance after a reversal is 1, not 0.",
        fails=["reversal"],
    )
    s.read(
        "crates/ledger-core/src/posting.rs",
        "LedgerPosting is plain data; the test builds an entry and its reversal and expects a zero balance.",
        focus="LedgerPosting",
    )
    s.read(
        "crates/ledger-core/src/postings.rs",
        "postings.rs is the batch of postings, unrelated to the reversal.",
    )
    s.read(
        "crates/ledger-core/src/journal.rs",
        "reverse_posting subtracts 1 from the amount when it reverses, on purpose or not; git blame says it came with "
        f"the fee rework last spring. {d['reversal-later']}",
        focus="reverse_posting",
    )
    s.run(
        "git log -3 --format='%h %an %s' -- crates/ledger-core/src/journal.rs",
        "9c41e2a Priya Raman journal: reversals net the reversal fee\n"
        "5d0b7f3 Priya Raman journal: postings carry the account id\n"
        "e21a9c8 Tom Okafor ledger-core: journal module",
        "It was deliberate at the time (a reversal fee), so it needs the ledger team's call.",
    )
    s.add(
        "crates/ledger-core/src/rounding.rs",
        _CREATED["crates/ledger-core/src/rounding.rs"],
        f"Added rounding.rs with round_half_even. {d['half-even']}",
        defines=("round_half_even",),
    )
    s.edit(
        "crates/ledger-core/src/lib.rs",
        "pub mod posting;\npub mod postings;",
        "pub mod posting;\npub mod postings;\npub mod rounding;",
        "Declared the module.",
    )
    s.run(
        "cargo clippy -p ledger-core -- -D warnings",
        _cargo_build("ledger-core", ["clippy"], clippy=True),
        "Clippy (pedantic, as the workspace sets it) refuses the i128 to i64 cast in round_half_even.",
        fails=["clippy"],
    )
    s.edit(
        "crates/ledger-core/src/rounding.rs",
        "    quotient as i64",
        '    i64::try_from(quotient).expect("a rounded amount fits in i64")',
        "The cast is checked now.",
        focus="round_half_even",
    )
    s.run(
        "cargo clippy -p ledger-core -- -D warnings",
        _cargo_build("ledger-core", clippy=True),
        "Clippy is clean.",
        fixes=["clippy"],
    )
    s.write(
        "crates/ledger-core/tests/rounding.rs",
        _CREATED["crates/ledger-core/tests/rounding.rs"],
        "Added integration tests for the rounding.",
    )
    s.run(
        "cargo test -p ledger-core",
        s.cargo_test("ledger-core", ["reversal"]),
        "The rounding tests pass; reversal_keeps_balance still fails, as expected.",
        fails=["reversal"],
    )
    s.run(
        "cargo build -p ledger-api",
        _cargo_build("ledger-api"),
        "ledger-api builds against the new MinorUnits. The crate no longer converts through floats; the reversal "
        "test is the one failure left, and it predates this work.",
    )

    # -- 3. idempotent refund creation ------------------------------------------------------------------------
    s.ask(
        "Support says a merchant got refunded twice for one click: the admin retried the request. Make refund "
        "creation safe to retry."
    )
    s.read(
        "src/orders/api/refund_routes.py",
        "create_refund_route creates a refund on every POST; nothing recognises a retry.",
        focus="create_refund_route",
    )
    s.read("src/orders/api/routes.py", "routes.py mounts refund_routes under /orders; no middleware dedupes.")
    s.read(
        "src/orders/services/refunds_service.py",
        "refunds_service.py lists and searches refunds; creation is only in refund_service.py.",
    )
    s.grep(
        r"Idempotency|idempotency",
        ("src/orders/api/routes.py", "src/orders/services/gateway_client.py"),
        "Nothing yet.",
    )
    s.ask("How would you do it?")
    s.say(
        f"{d['idempotency']} The route reads the header, the store maps it to the first refund's id, and a retry "
        "returns that refund instead of creating one."
    )
    s.write(
        "src/orders/services/idempotency.py",
        _CREATED["src/orders/services/idempotency.py"],
        "Wrote IdempotencyStore. Tests next.",
        defines=("IdempotencyStore",),
    )
    s.write("tests/test_idempotency.py", _CREATED["tests/test_idempotency.py"], "Three tests for the store.")
    s.run(
        "pytest tests/test_idempotency.py -v",
        s.pytest_v("tests/test_idempotency.py", ["idempotency"]),
        "test_duplicate_key_returns_first_refund fails with a KeyError: remember reads a local dict that is never filled.",
        fails=["idempotency"],
    )
    s.edit(
        "src/orders/services/idempotency.py",
        '        return self._seen[self._namespaced(key)]["refund_id"]',
        "        return self.redis.get(self._namespaced(key))",
        "remember reads the first id back from Redis now.",
        focus="IdempotencyStore",
    )
    s.run(
        "pytest tests/test_idempotency.py -v",
        s.pytest_v("tests/test_idempotency.py"),
        f"The store works. {d['conflict']}",
        fixes=["idempotency"],
    )
    s.read("src/orders/api/errors.py", "errors.py has RefundNotAllowed; I'll add the duplicate case beside it.")
    s.edit(
        "src/orders/api/errors.py",
        "        super().__init__(status_code=422, detail=detail)",
        "        super().__init__(status_code=422, detail=detail)\n\n\nclass DuplicateRefund(HTTPException):\n"
        '    """A retried request whose Idempotency-Key already made a refund."""\n\n'
        "    def __init__(self, refund_id: str) -> None:\n"
        '        super().__init__(status_code=409, detail={"refund_id": refund_id})',
        "Added DuplicateRefund.",
    )
    s.edit(
        "src/orders/api/refund_routes.py",
        "def create_refund_route(order_id: str, body: RefundRequest, service: RefundService = Depends(refund_service)):",
        "def create_refund_route(\n    order_id: str,\n    body: RefundRequest,\n"
        '    idempotency_key: str = Header(alias="Idempotency-Key"),\n'
        "    service: RefundService = Depends(refund_service),\n):",
        "The route takes the header; the store lookup goes in before service.create.",
        focus="create_refund_route",
    )
    s.read("src/orders/api/schemas.py", "RefundRequest and RefundResponse stay as they are.")
    s.read(
        "tests/conftest.py",
        f"conftest patches GatewayClient.refund with a fake. {d['sandbox']}",
    )
    s.read(
        "src/orders/services/gateway_client.py",
        "GatewayClient takes its base URL from settings, so the sandbox stub only needs ORDERS_GATEWAY_URL.",
        focus="GatewayClient",
    )
    s.run(
        py_tests,
        s.pytest_q(),
        "The whole Python suite passes. Retried refund requests now get the first refund back.",
    )

    # -- 4. the admin form (TypeScript) ---------------------------------------------------------------------
    s.ask(
        "The admin refund form still sends amounts as decimal strings. Switch the admin to minor units, like the "
        "backend."
    )
    s.read(
        "admin/src/components/RefundForm.tsx",
        "RefundAmountInput keeps the amount as the text the user typed and passes it up unchanged.",
        focus="RefundAmountInput",
    )
    s.read("admin/src/components/RefundsTable.tsx", "The table only displays amounts.")
    s.read("admin/src/components/RefundRow.tsx", "RefundRow formats each amount with the browser's locale.")
    s.read(
        "admin/src/api/refund.ts",
        "createRefund posts { amount, reason } with the amount as a string.",
        focus="createRefund",
    )
    s.read(
        "admin/src/api/refunds.ts",
        "fetchRefundPage is the paginated list the table uses.",
        focus="fetchRefundPage",
    )
    s.read(
        "admin/src/utils/money.ts",
        "formatMinorUnits exists already and takes a number of minor units.",
        focus="formatMinorUnits",
    )
    s.read("admin/src/utils/currency.ts", "currency.ts has the digits per currency.")
    s.read("admin/src/types/refund.ts", "The Refund type has amount: string.")
    s.read("admin/src/types/refunds.ts", "refunds.ts holds the page type; it reuses Refund.")
    s.edit(
        "admin/src/types/refund.ts",
        "  amount: string;",
        "  amountMinor: bigint;",
        "The type carries amountMinor as a bigint now. Type-checking to find the callers.",
    )
    s.run(
        "npx tsc --noEmit -p admin",
        _tsc(["ts2322", "ts2345"]),
        "Two errors: the form binds the bigint to a text input (TS2322), and the page fetch passes it as a query "
        "parameter (TS2345).",
        fails=["ts2322", "ts2345"],
    )
    s.edit(
        "admin/src/components/RefundForm.tsx",
        '      <input inputMode="decimal" value={value} onChange={(e) => onChange(e.target.value)} />',
        '      <input inputMode="decimal" value={formatMinorUnits(value, currency)} '
        "onChange={(e) => onChange(parseMinor(e.target.value, currency))} />",
        "RefundAmountInput formats and parses minor units.",
        focus="RefundAmountInput",
    )
    s.run(
        "npx tsc --noEmit -p admin",
        _tsc(["ts2345"]),
        "The form compiles. The error in refunds.ts is left: the shared http client's query types only take strings, "
        "and the platform team owns that client, so it waits for their change.",
        fails=["ts2345"],
        fixes=["ts2322"],
    )
    s.run(
        "npx eslint admin/src --max-warnings 0",
        _eslint(["eslint"]),
        "eslint: useRefundsQuery's effect does not list orderId in its dependencies. Let me look.",
        fails=["eslint"],
    )
    s.read(
        "admin/src/hooks/useRefunds.ts",
        "useRefundsQuery fetches once and never again when orderId changes; adding it re-fetches on every render "
        "because orderId is rebuilt by the parent. That needs the parent memoized first.",
        focus="useRefundsQuery",
    )
    s.read("admin/src/hooks/useRefund.ts", "useRefund, the single-refund hook, has the same shape but lists its deps.")
    s.run(
        "npx vitest run admin/src/components/RefundForm.test.tsx",
        _vitest("admin/src/components/RefundForm.test.tsx", 6),
        "The form's tests pass.",
    )
    s.read("admin/package.json", "The engines field pins the Node major version.")
    s.ask("Should we move the admin to Node 22 while we are at it?")
    s.say(
        f"{d['node']} Node 22 changes the default fetch timeouts the http client relies on, which deserves its own "
        "change."
    )
    s.read("admin/tsconfig.json", "tsconfig is strict with noUncheckedIndexedAccess, nothing to change.")

    # -- 5. webhooks processed twice -------------------------------------------------------------------------
    s.ask("Another one: the gateway retries webhooks and we process some events twice. Look at the webhook handling.")
    s.read(
        "src/orders/handlers/webhook.py",
        "verify_signature checks the HMAC but ignores the timestamp, so a replayed event verifies forever.",
        focus="verify_signature",
    )
    s.read(
        "src/orders/handlers/webhooks.py",
        "WebhookRouter dispatches by event type; it does not remember event ids.",
        focus="WebhookRouter",
    )
    s.read("tests/test_webhooks.py", "There is a replay test already.")
    s.run(
        "pytest tests/test_webhooks.py -v",
        s.pytest_v("tests/test_webhooks.py", ["webhook"]),
        "test_replayed_event_is_rejected fails: the replay gets 200.",
        fails=["webhook"],
    )
    s.read("tests/test_webhook.py", "test_webhook.py (singular) covers the signature format only.")
    s.edit(
        "src/orders/handlers/webhook.py",
        '    return hmac.compare_digest(expected, parts["v1"])',
        '    if abs(time.time() - int(parts["t"])) > REPLAY_TOLERANCE_S:\n        return False\n'
        '    return hmac.compare_digest(expected, parts["v1"])',
        "verify_signature refuses events older than the tolerance.",
        focus="verify_signature",
    )
    s.run(
        "pytest tests/test_webhooks.py -v",
        s.pytest_v("tests/test_webhooks.py", ["webhook"]),
        "Still 200: the test replays within a second, so the timestamp check cannot catch it; the router has to "
        "remember event ids. I'll come back to it after the user's other items.",
        fails=["webhook"],
    )
    s.ask("The gateway wants to add a field to the refund.succeeded payload. Anything to watch for?")
    s.say(f"{d['webhook-v1']} The router ignores unknown keys, so the extra field is harmless on our side.")
    s.read("src/orders/handlers/chargeback.py", "open_chargeback parses the disputed amount with Decimal: fine.")
    s.read("src/orders/handlers/chargebacks.py", "chargebacks.py lists the open cases; no arithmetic.")
    s.read(
        "src/orders/handlers/capture.py",
        "capture.py is the old single-capture path, kept for the v1 API.",
    )
    s.read(
        "src/orders/handlers/captures.py",
        "CaptureHandler takes an optional partial amount and passes it to the gateway as Money.",
        focus="CaptureHandler",
    )
    s.read("tests/test_capture_handler.py", "Partial captures are tested.")
    s.run(
        "pytest tests/test_capture_handler.py -v",
        s.pytest_v("tests/test_capture_handler.py"),
        "They pass. Currency codes reach CaptureHandler unchecked, though.",
    )
    s.read(
        "src/orders/models/currency.py",
        f"normalize_currency only upper-cases. {d['iso']}",
        focus="normalize_currency",
    )
    s.edit(
        "src/orders/models/currency.py",
        "    return code.strip().upper()",
        "    code = code.strip().upper()\n    if code not in KNOWN_CODES:\n"
        '        raise ValueError(f"unknown currency code {code!r}")\n    return code',
        "normalize_currency rejects unknown codes; the API schemas call it.",
        focus="normalize_currency",
    )
    s.run(
        "pytest tests/test_money.py -v",
        s.pytest_v("tests/test_money.py"),
        "The webhook replay test is still open; the capture and currency changes pass their tests.",
    )

    # -- 6. the backfill and the migration -------------------------------------------------------------------
    s.ask(
        "Old refunds need their amounts in minor units too. There is a backfill script somewhere; get it working "
        "and plan the migration."
    )
    s.read(
        "src/orders/tools/backfill.py",
        "run_backfill recomputes each refund's minor amount from its decimal amount and currency.",
        focus="run_backfill",
    )
    s.read("src/orders/tools/backfill_refunds.py", "backfill_refunds.py is the 2024 one-off for the reason column.")
    s.read("src/orders/tools/reconcile.py", "reconcile.py compares our refunds with the gateway's report.")
    s.run(
        "python -m orders.tools.backfill --dry-run --since 2026-11-01",
        _traceback(),
        "It crashes on the first row without a currency: KeyError 'currency'. Some old rows predate the column.",
        fails=["backfill"],
        description="Dry-run the refunds backfill",
    )
    s.read("migrations/0041_refund_reason.py", "0041 added the reason column with a default; no currency default.")
    s.run(
        'psql "$ORDERS_DATABASE_URL" -c "select count(*) from refunds where currency is null"',
        " count\n-------\n  1842\n(1 row)",
        "1842 refunds have no currency. They are all from before multi-currency, so EUR is the likely answer, but "
        "that is for finance to decide; the backfill stays broken on those rows until they confirm.",
    )
    s.ask("Fine, leave those rows for now. What about the schema change?")
    s.say(f"{d['migration']} Until then both columns are written, and reads prefer amount_minor.")
    s.write(
        "migrations/0042_refund_minor_units.py",
        _CREATED["migrations/0042_refund_minor_units.py"],
        "Wrote migration 0042: amount_minor beside amount.",
    )
    s.read(
        "src/orders/services/ledger_client.py",
        f"post_refund has no retry at all; a ledger hiccup loses the posting. {d['dead-letter']}",
        focus="post_refund",
    )
    s.edit(
        "src/orders/services/ledger_client.py",
        '    response.raise_for_status()\n    return response.json()["posting_id"]',
        "    if response.status_code >= 500:\n        raise LedgerUnavailable(response.status_code)\n"
        '    response.raise_for_status()\n    return response.json()["posting_id"]',
        "post_refund raises LedgerUnavailable on a 5xx; the retry wraps it in the service.",
        focus="post_refund",
    )
    s.run(
        "pytest tests/test_refund_service.py -v",
        s.pytest_v("tests/test_refund_service.py"),
        "The service tests pass.",
    )
    s.run(
        "pytest tests/test_refunds_service.py -v",
        s.pytest_v("tests/test_refunds_service.py"),
        "The listing service's tests pass too.",
    )
    s.read(
        "src/orders/services/notifier.py",
        f"The notifier logs 'refund done' with no ids, which is why support could not trace the duplicate. "
        f"{d['log-ids']}",
        focus="Notifier",
    )
    s.edit(
        "src/orders/services/notifier.py",
        '        log.info("refund done")',
        '        log.info("refund done", extra={"order_id": refund.order_id, "refund_id": refund.id})',
        "The log line carries the ids.",
        focus="Notifier",
    )
    s.read("src/orders/services/notifications.py", "notifications.py holds the templates; no logging there.")
    s.read("src/orders/settings.py", "REFUND_DAYS comes from ORDERS_REFUND_DAYS; the policy reads it.")
    s.read(
        ".github/workflows/ci.yml", "CI runs the Python suite with mypy, clippy with -D warnings, and the admin lint."
    )
    s.read("pyproject.toml", "mypy is strict for the orders package.")
    s.read("Cargo.toml", "The workspace turns clippy's pedantic group on, which is why the cast was refused.")
    s.run(
        "pytest tests/test_backfill.py -v",
        s.pytest_v("tests/test_backfill.py"),
        "The backfill's unit tests pass; they never had a row without a currency. The real dry run still fails on "
        "those 1842 rows.",
    )

    # -- 7. reconciliation with the gateway -----------------------------------------------------------------
    s.ask(
        "Finance's reconciliation shows refunds whose amounts differ from the gateway's by a cent. Run the reconcile "
        "tool for last week."
    )
    s.run(
        "python -m orders.tools.reconcile --from 2026-11-09 --to 2026-11-15",
        "period 2026-11-09..2026-11-15: 4112 refunds here, 4112 at the gateway\n"
        "amount mismatches (ours vs gateway):\n"
        "  rf_7Zp1  ord_44Ka  EUR  33.32 vs 33.33\n  rf_7Zq8  ord_44Kd  EUR  16.66 vs 16.67\n"
        "  rf_80a2  ord_45B1  SEK  108.32 vs 108.33\n3 mismatches, 0 missing",
        "Three mismatches, all thirds of an amount: the old float rounding, made before today's fix.",
        description="Reconcile last week's refunds",
    )
    s.read(
        "src/orders/tools/reconcile.py",
        "reconcile_refunds compares our Decimal amount, through float(), with the gateway's number.",
        focus="reconcile_refunds",
    )
    s.edit(
        "src/orders/tools/reconcile.py",
        "        elif float(mine.amount.amount) != item.amount:",
        "        elif to_minor_units(mine.amount) != item.amount_minor:",
        "reconcile_refunds compares minor units on both sides now.",
        focus="reconcile_refunds",
    )
    s.write(
        "tests/test_reconcile.py",
        '''"""reconcile_refunds: what differs between our refunds and the gateway's report."""

from __future__ import annotations

from decimal import Decimal

from orders.models.money import Money
from orders.tools.reconcile import GatewayRefund, reconcile_refunds


def test_equal_minor_units_match(make_refund) -> None:
    ours = [make_refund("gw_1", Money(Decimal("33.33"), "EUR"))]
    theirs = [GatewayRefund("gw_1", amount_minor=3333)]
    assert not reconcile_refunds(ours, theirs).mismatched


def test_a_cent_apart_is_reported(make_refund) -> None:
    ours = [make_refund("gw_2", Money(Decimal("33.32"), "EUR"))]
    theirs = [GatewayRefund("gw_2", amount_minor=3333)]
    assert len(reconcile_refunds(ours, theirs).mismatched) == 1


def test_missing_on_either_side(make_refund) -> None:
    report = reconcile_refunds([make_refund("gw_3", Money(Decimal("1"), "EUR"))], [GatewayRefund("gw_4", 100)])
    assert report.missing_there and report.missing_here''',
        "Tests for the reconciliation.",
    )
    s.run(
        "pytest tests/test_reconcile.py -v",
        s.pytest_v("tests/test_reconcile.py"),
        "They pass.",
    )
    s.run(
        "python -m orders.tools.reconcile --from 2026-11-09 --to 2026-11-15",
        "period 2026-11-09..2026-11-15: 4112 refunds here, 4112 at the gateway\n"
        "amount mismatches (ours vs gateway):\n"
        "  rf_7Zp1  ord_44Ka  EUR  3332 vs 3333\n  rf_7Zq8  ord_44Kd  EUR  1666 vs 1667\n"
        "  rf_80a2  ord_45B1  SEK  10832 vs 10833\n3 mismatches, 0 missing",
        "The same three, now in minor units: real one-cent underpayments from before the fix, which finance can "
        "settle by hand. Nothing new since today's change.",
        description="Reconcile last week's refunds",
    )

    # -- 8. a second partial refund can overshoot --------------------------------------------------------------
    s.ask("A second partial refund on the same order can push the total over the capture. Fix that.")
    s.read(
        "src/orders/services/refunds_service.py",
        "total_refunded sums an order's refunds as Money; it fails on an order without refunds (refunds[0]).",
        focus="total_refunded",
    )
    s.edit(
        "src/orders/services/refunds_service.py",
        "    return sum((r.amount for r in refunds), start=Money(Decimal(0), refunds[0].amount.currency))",
        "    return Money.from_minor(sum(to_minor_units(r.amount) for r in refunds), currency_of(order_id))",
        "total_refunded sums minor units and works for an order without refunds.",
        focus="total_refunded",
    )
    s.read(
        "src/orders/handlers/refund_policy.py",
        "RefundPolicy.check looks at one refund against the capture, never at what was refunded before.",
        focus="RefundPolicy",
        span=25,
    )
    s.edit(
        "src/orders/handlers/refund_policy.py",
        "        if to_minor_units(amount) > to_minor_units(order.captured_total) * self.max_ratio:",
        "        already = to_minor_units(total_refunded(order.id))\n"
        "        if to_minor_units(amount) + already > to_minor_units(order.captured_total) * self.max_ratio:",
        "The check counts earlier refunds.",
        focus="RefundPolicy",
    )
    s.edit(
        "tests/test_refund_policy.py",
        "def test_refund_cannot_exceed_capture(eur_order: Order) -> None:",
        "def test_second_partial_refund_cannot_overshoot(eur_order: Order, refunded: Callable[..., None]) -> None:\n"
        '    refunded(eur_order, Money(Decimal("60.00"), "EUR"))\n'
        "    with pytest.raises(RefundLimitExceeded):\n"
        '        RefundPolicy().check(eur_order, Money(Decimal("40.01"), "EUR"))\n\n\n'
        "def test_refund_cannot_exceed_capture(eur_order: Order) -> None:",
        "Added the overshoot test.",
    )
    s.run(
        "pytest tests/test_refund_policy.py -v",
        s.pytest_v("tests/test_refund_policy.py"),
        "The policy tests pass, the new one included.",
    )
    s.run(
        "pytest tests/test_refunds_service.py -v",
        s.pytest_v("tests/test_refunds_service.py"),
        "And the service's.",
    )

    # -- 9. the admin table after the type change --------------------------------------------------------------
    s.ask("The refunds table in the admin shows 3333 where it used to show 33.33. Fix the display.")
    s.read(
        "admin/src/components/RefundRow.tsx",
        "RefundRow prints refund.amountMinor as it is.",
    )
    s.edit(
        "admin/src/components/RefundRow.tsx",
        'import { useEffect, useState } from "react";',
        'import { useEffect, useState } from "react";\nimport { formatMinorUnits } from "../utils/money";',
        "Imported formatMinorUnits into RefundRow; the amount cell uses it.",
    )
    s.read("admin/src/components/RefundsTable.tsx", "RefundsTable passes rows through untouched, so one fix covers it.")
    s.write(
        "admin/src/components/RefundsTable.test.tsx",
        """import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";

import { RefundsTable } from "./RefundsTable";

describe("RefundsTable", () => {
  it("shows amounts in major units", () => {
    render(<RefundsTable rows={[{ id: "rf_1", amountMinor: 3333n, currency: "EUR" }]} />);
    expect(screen.getByText("\u20ac33.33")).toBeTruthy();
  });

  it("uses the currency's digits", () => {
    render(<RefundsTable rows={[{ id: "rf_2", amountMinor: 500n, currency: "JPY" }]} />);
    expect(screen.getByText("\uffe5500")).toBeTruthy();
  });
});""",
        "A test for the table.",
    )
    s.run(
        "npx vitest run admin/src/components/RefundsTable.test.tsx",
        _vitest("admin/src/components/RefundsTable.test.tsx", 2),
        "The table shows major units again.",
    )

    # -- 10. a last sweep for float money --------------------------------------------------------------------
    s.ask("Before we wrap up: sweep the rest of the service for float money and fix what you find.")
    python = [p for p in _REPO if p.startswith("src/orders/") and p.endswith(".py")]
    s.grep(r"float\(", python, "One hit outside what we changed: cancel.py.")
    s.read(
        "src/orders/handlers/cancel.py",
        "cancel_order computes the cancellation fee in floats.",
        focus="cancel_order",
    )
    s.edit(
        "src/orders/handlers/cancel.py",
        "    fee = float(order.authorized_total.amount) * CANCEL_FEE_RATE\n"
        "    return Cancellation(order_id=order.id, fee=Money.of(round(fee, 2), order.currency), reason=reason)",
        "    fee_minor = round_half_even(to_minor_units(order.authorized_total) * CANCEL_FEE_BPS, 10_000)\n"
        "    return Cancellation(order_id=order.id, fee=Money.from_minor(fee_minor, order.currency), reason=reason)",
        "cancel_order computes the fee in minor units, in basis points.",
        focus="cancel_order",
    )
    s.read("src/orders/handlers/cancellation.py", "cancellation.py only maps the gateway's cancellation reasons.")
    s.read("src/orders/models/order.py", "Order holds Money everywhere; no float.", focus="Order")
    s.read("src/orders/models/orders.py", "orders.py is the repository; it loads amounts as Decimal.")
    s.read("src/orders/models/payment.py", "payment.py: the payment method, no amounts.")
    s.read("src/orders/models/payments.py", "payments.py: the list of payment attempts, amounts as Money.")
    s.read(
        "src/orders/models/money.py",
        f"to_minor_units still rounds half-up, and Money.of still accepts a float. {d['amount-type']}",
        focus="to_minor_units",
        span=30,
    )
    s.edit(
        "src/orders/models/money.py",
        "    return int((money.amount * 10**exponent).quantize(Decimal(1), rounding=ROUND_HALF_UP))",
        "    return int((money.amount * 10**exponent).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))",
        "to_minor_units rounds half to even, like the crate.",
        focus="to_minor_units",
    )
    s.write(
        "src/orders/models/amounts.py",
        _CREATED["src/orders/models/amounts.py"],
        "Added RefundAmount; the route builds one from the request before anything else sees the amount.",
        defines=("RefundAmount",),
    )
    s.read("tests/test_money.py", "test_money.py covers to_minor_units for EUR, JPY and KWD.")
    s.read("tests/orders/models/test_refund.py", "The model tests build refunds from Money; still fine.")
    s.read("tests/orders/models/test_refund_line.py", "RefundLine tests use Decimal ratios.")
    s.read("tests/orders/handlers/test_refund.py", "The older handler tests duplicate test_refund_handler.py's.")
    s.read("tests/test_refunds_handler.py", "The batch tests build lines with Decimal ratios too.")
    s.read("crates/ledger-core/src/account.rs", "account.rs: account ids and kinds.")
    s.read("crates/ledger-core/src/accounts.rs", "accounts.rs: the chart of accounts.")
    s.read("crates/ledger-core/src/currency.rs", "currency.rs has the minor-unit exponents; it agrees with ours.")
    s.read("crates/ledger-core/tests/money.rs", "The crate's money tests use MinorUnits directly.")
    s.read("crates/ledger-core/tests/posting.rs", "posting.rs integration tests do not cover reversals.")
    s.read("crates/ledger-api/src/main.rs", "main.rs wires the routes.")
    s.read("crates/ledger-api/src/routes.rs", "routes.rs maps /postings and /refunds.")
    s.read("crates/ledger-api/src/handlers/mod.rs", "mod.rs re-exports the handlers.")
    s.run(
        py_tests,
        s.pytest_q(["webhook"]),
        "One failure left in the Python suite: test_replayed_event_is_rejected, the webhook replay, still open.",
        fails=["webhook"],
    )
    s.run(
        "cargo test -p ledger-core",
        s.cargo_test("ledger-core", ["reversal"]),
        "The crate: only reversal_keeps_balance, waiting for the ledger team.",
        fails=["reversal"],
    )
    s.run(
        "npx tsc --noEmit -p admin",
        _tsc(["ts2345"]),
        "The admin: the TS2345 in refunds.ts, waiting for the platform team's client change.",
        fails=["ts2345"],
    )
    s.run(
        "npx eslint admin/src --max-warnings 0",
        _eslint(["eslint"]),
        "And the exhaustive-deps error in useRefunds.ts.",
        fails=["eslint"],
    )
    s.run("git diff --stat", s.diff_stat(), "That is the change set.")
    # -- 11. tests for the ledger-api handler -----------------------------------------------------------------
    s.ask("Add tests for the ledger-api refund handler's amount parsing.")
    s.read(
        "crates/ledger-api/src/handlers/refund.rs",
        "refund_to_ledger returns the parse error as a 422 through ApiResult.",
        focus="refund_to_ledger",
    )
    s.read("crates/ledger-api/src/handlers/mod.rs", "The handlers are public, so an integration test can call them.")
    s.write(
        "crates/ledger-api/tests/refund_amounts.rs",
        """use ledger_api::handlers::refund::refund_to_ledger;
use ledger_api::testing::{app, request};

#[tokio::test]
async fn a_decimal_string_is_posted_in_minor_units() {
    let app = app().await;
    let id = refund_to_ledger(app.state(), request("acct_1", "33.33")).await.unwrap();
    assert_eq!(app.journal().amount_of(&id).await, 3333);
}

#[tokio::test]
async fn a_float_like_string_with_three_decimals_is_refused() {
    let app = app().await;
    let err = refund_to_ledger(app.state(), request("acct_1", "33.333")).await.unwrap_err();
    assert_eq!(err.status(), 422);
}

#[tokio::test]
async fn a_negative_amount_is_refused() {
    let app = app().await;
    assert!(refund_to_ledger(app.state(), request("acct_1", "-1.00")).await.is_err());
}""",
        "Three integration tests for the amount parsing.",
    )
    s.run(
        "cargo test -p ledger-api",
        s.cargo_test("ledger-api"),
        "ledger-api's tests pass, the new ones included.",
    )
    s.run(
        "cargo clippy --workspace -- -D warnings",
        _cargo_build("ledger-api", clippy=True),
        "Clippy is clean on the whole workspace.",
    )

    # -- 12. commits and a draft pull request --------------------------------------------------------------
    s.ask("Commit this in sensible pieces and open a draft PR.")
    s.run("git status --short", s.status_short(), "Three areas: the service, the crates, the admin.")
    for area, subject in (
        ("src/orders tests migrations", "fix(refunds): integer minor units in the orders service"),
        ("crates", "fix(ledger-core): widen MinorUnits, round ties to even"),
        ("admin", "fix(admin): refund amounts in minor units"),
    ):
        count = sum(1 for p in s.changed() if p.startswith(tuple(area.split())))
        s.run(
            f'git add {area} && git commit -m "{subject}"',
            f"[refunds-minor-units {zlib.crc32(subject.encode()) % 0xFFFFFFF:07x}] {subject}\n"
            f" {count} files changed, {11 * count} insertions(+), {4 * count} deletions(-)",
            "Committed.",
        )
    s.run(
        'gh pr create --draft --title "Refunds in integer minor units" --body-file .git/PR_BODY.md',
        "https://github.com/acme/payments/pull/2291",
        "Draft PR 2291 is open; its body lists the open failures.",
    )
    s.ask("Summarize where we are.")
    s.say(
        "Money is integer minor units in the service, the crate and the admin form; refunds round once, half to even. "
        "Refund creation is idempotent. Open: the webhook replay test, the reversal test in ledger-core, the TS2345 "
        "in refunds.ts, the exhaustive-deps error in useRefunds.ts, and the backfill's rows without a currency."
    )


_USER_AGAIN = (
    "Keep going: re-check {path} against everything we changed today.",
    "Look at {path} once more; I want to be sure nothing there still assumes floats.",
    "Run through {path} again before I review the branch.",
)


@dataclass(frozen=True)
class _LongSession:
    """The story, then (for a longer ``--turns``) the agent re-reading and re-running what it worked on."""

    def turns(self, rng: random.Random) -> Iterator[ScriptedTurn]:
        s = _Story()
        _story(s)
        yield from list(s.turns)
        # Then the repository as the story left it: a re-read shows its edits, a run its open failures.
        paths = sorted(set(_REPO) | set(s.files))
        open_python, open_rust = ["webhook"], ["reversal"]
        first = True
        while True:
            path = paths[rng.randrange(len(paths))]
            roll = rng.random()
            if first or roll < 0.15:  # the story ended with the agent's summary: the user speaks next
                s.ask(rng.choice(_USER_AGAIN).format(path=path))
            if roll < 0.7:
                s.read(path, f"Re-read {path}: it agrees with the changes.")
            elif roll < 0.85:
                s.run(
                    "python -m pytest -q",
                    s.pytest_q(open_python),
                    "Same state: the replay test fails.",
                    fails=open_python,
                )
            else:
                s.run(
                    "cargo test -p ledger-core",
                    s.cargo_test("ledger-core", open_rust),
                    "Same state: the reversal test fails.",
                    fails=open_rust,
                )
            first = False
            yield s.turns[-1]


LONG = Scenario(
    name="long",
    title="Refunds rework across a payments monorepo (Python, Rust, TypeScript), the agent's own work to keep",
    turns=200,
    window=30_000,
    work_gated=True,
    system=(
        f"You are a coding agent working in the payments monorepo at {ROOT}: the orders service (Python 3.12, "
        "pytest, mypy), the ledger crates (Rust, cargo) and the admin app (TypeScript, React, Vite). Use the tools "
        "to read, change and run things. Keep replies short."
    ),
    source=_LongSession(),
    tools=TOOLS,
    root=ROOT,
    shell=("Bash", "command"),
    search=("Grep", "pattern"),
    facts=(
        Fact(
            "schemas",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "the response schemas in src/orders/api/schemas.py must stay backwards compatible, the mobile app pins "
            "them.",
            "mobile app",
            "Which module's response schemas must stay backwards compatible?",
            "src/orders/api/schemas.py",
            0.03,
            "One rule for this whole piece of work:",
        ),
        Fact(
            "refund-window",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "keep the refund window at 30 days after capture.",
            "refund window",
            "How many days after capture is the refund window?",
            "30",
            0.06,
            "About the policy checks:",
        ),
        Fact(
            "gateway-fixtures",
            KIND_FILE_PATH,
            SOURCE_USER,
            "The recorded gateway responses are in tests/fixtures/gateway/2026-10/, never regenerate them.",
            "recorded gateway responses",
            "Where are the recorded gateway responses?",
            "tests/fixtures/gateway/2026-10",
            0.15,
            "When you touch the gateway tests:",
        ),
        Fact(
            "merchant",
            KIND_IDENTIFIER,
            SOURCE_USER,
            "the merchant who reported the double refund is MRC-40517.",
            "double refund",
            "Which merchant reported the double refund?",
            "MRC-40517",
            0.21,
            "For the record, from support:",
        ),
        Fact(
            "posting-rejected",
            KIND_ERROR,
            SOURCE_TOOL,
            "ledger.exceptions.PostingRejected: LGR-7731 insufficient balance on acct_refunds_eu",
            "PostingRejected",
            "Which ledger code did the rejected posting report?",
            "LGR-7731",
            0.27,
            "kubectl logs deploy/ledger-api --since=1h --tail=3",
            before=("2026-11-19T08:02:41Z INFO  ledger_api::handlers::refund posting accepted id=pst_81kQ",),
            after=("2026-11-19T08:02:47Z INFO  ledger_api::handlers::refund posting accepted id=pst_81kR",),
            error=error("PostingRejected LGR-7731", (Needle("PostingRejected"),), (Needle("LGR-7731"),)),
        ),
        Fact(
            "fx-cache",
            KIND_FILE_PATH,
            SOURCE_TOOL,
            f"{ROOT}/src/orders/services/fx/rate_cache.py:31:def cached_rate(currency: str, day: date) -> Decimal:",
            "cached_rate",
            "Which file defines cached_rate?",
            "src/orders/services/fx/rate_cache.py",
            0.32,
            "def cached_",
            tool="grep",
            before=(f"{ROOT}/src/orders/services/gateway_client.py:12:def cached_session() -> httpx.Client:",),
        ),
        Fact(
            "commits",
            KIND_PREFERENCE,
            SOURCE_USER,
            "for commit messages I want conventional commits, with the scope in parentheses.",
            "commit messages",
            "Which style does the user want for commit messages?",
            "conventional commits",
            0.37,
            "When you commit:",
        ),
        Fact(
            "txn",
            KIND_IDENTIFIER,
            SOURCE_TOOL,
            "2026-11-19T08:02:44Z ERROR ledger posting rejected txn=txn_9QpLm27Xc status=422",
            "ledger posting rejected",
            "Which transaction id did the ledger log for the rejected posting?",
            "txn_9QpLm27Xc",
            0.42,
            "grep -h ERROR /var/log/orders/ledger-client.log | tail -n 1",
            before=(),
            after=(),
        ),
        Fact(
            "partial-cap",
            KIND_DECISION,
            SOURCE_ASSISTANT,
            "I will cap each partial refund at the captured amount minus the refunds already made.",
            "cap each partial refund",
            "At what did the assistant decide to cap each partial refund?",
            "captured amount",
            0.47,
            "A refund after an earlier partial one can overshoot today, so:",
        ),
        Fact(
            "fin-ops",
            KIND_PENDING,
            SOURCE_USER,
            "once this lands, tell the finance team in #fin-ops that the backfill can run.",
            "finance team",
            "Whom must the assistant tell, and where, once this lands?",
            "#fin-ops",
            0.55,
            "Not now, but do not forget:",
        ),
        Fact(
            "refund-window-now",
            KIND_REVERSAL,
            SOURCE_USER,
            "Change of plan: the refund window is now 60 days after capture, legal signed off.",
            "refund window",
            "How many days after capture is the refund window now?",
            "60",
            0.68,
            "Legal came back to me.",
            reverses="refund-window",
        ),
    ),
)
