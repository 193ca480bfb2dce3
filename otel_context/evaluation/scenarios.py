"""The scripted conversations of ``otel-context eval``: coding-agent sessions with planted facts.

What a scenario is made of is in :mod:`otel_context.evaluation.script`. Three short-artifact sessions
(``billing``, ``frontend``, ``pipeline``) fill the turns between their facts with filler that looks like a
coding agent's work (files read, tests run, searches, renames), generated from a fixed seed per scenario; the
long one (``long``, :mod:`otel_context.evaluation.long_session`) is a 200-turn session with seventy-odd
look-alike files, edits, errors fixed and left open, and decisions.

Issue 48's gate (a changed file, an open error or a decision lost fails a run) holds for every scenario, and the
long one is in the default set that CI runs, since the work trail keeps the agent's work (:data:`TRAIL_GATE`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from otel_context.evaluation.long_session import LONG
from otel_context.evaluation.script import (
    KIND_CONSTRAINT,
    KIND_DECISION,
    KIND_ERROR,
    KIND_FILE_PATH,
    KIND_IDENTIFIER,
    KIND_PENDING,
    KIND_PREFERENCE,
    KIND_REVERSAL,
    KINDS,
    SOURCE_ASSISTANT,
    SOURCE_TOOL,
    SOURCE_USER,
    Fact,
    Scenario,
    ScriptedTurn,
    ToolStep,
)
from otel_context.evaluation.work import CHANGES, PATH, PHRASE, Needle, WorkEvent, command, error, file

__all__ = ["DEFAULT_SCENARIOS", "SCENARIOS", "TRAIL_GATE", "get_scenario"]

#: Issue 48, on since the work trail keeps the agent's work (otel_context/compaction/trail.py): the long scenario is
#: in the default set (what ``make eval`` and CI run) and every scenario is gated on its changed files, open
#: errors and decisions. False: the long scenario runs when asked for (``--scenario long`` or ``all``) and is
#: gated; the short ones are measured, not gated.
TRAIL_GATE = True


@dataclass(frozen=True)
class Codebase:
    """What the filler of a scenario talks about."""

    language: str  #: python | typescript | go
    files: tuple[str, ...]
    test_command: str
    nouns: tuple[str, ...]
    verbs: tuple[str, ...]
    topics: tuple[str, ...]  #: what the user asks about

    def turns(self, rng: random.Random) -> Iterator[ScriptedTurn]:
        """The filler, turn after turn (the first one opens the session)."""
        filler = _Filler(self, rng)
        yield filler.turn(0, opening=True)
        for index in range(1, 1_000_000):
            yield filler.turn(index)


class _Filler:
    """Turns that look like a coding agent at work, from a seeded generator (no planted fact in them)."""

    def __init__(self, codebase: Codebase, rng: random.Random) -> None:
        self.cb = codebase
        self.rng = rng

    def _pick(self, items: Sequence[str]) -> str:
        return items[self.rng.randrange(len(items))]

    def _name(self) -> str:
        verb, noun = self._pick(self.cb.verbs), self._pick(self.cb.nouns)
        if self.cb.language == "python":
            return f"{verb}_{noun}"
        return verb + noun[:1].upper() + noun[1:]

    def _code(self, functions: int) -> str:
        lines: list[str] = []
        for _ in range(functions):
            name, a = self._name(), self._pick(self.cb.nouns)
            b = self._pick([n for n in self.cb.nouns if n != a])  # two parameters, two names
            if self.cb.language == "python":
                lines += [
                    f"def {name}({a}, {b}=None):",
                    f'    """{name.replace("_", " ").capitalize()} for the given {a}."""',
                    f"    if {b} is None:",
                    f"        {b} = load_{b}({a}.id)",
                    f"    total = sum(item.amount for item in {a}.items)",
                    f"    return {{'{a}': {a}.id, '{b}': {b}, 'total': total}}",
                    "",
                ]
            elif self.cb.language == "typescript":
                lines += [
                    f"export function {name}({a}: {a.capitalize()}, {b}?: {b.capitalize()}): Result {{",
                    f"  const items = {a}.items.filter((item) => item.visible);",
                    f"  if (!{b}) {{",
                    f"    return {{ {a}: {a}.id, count: items.length }};",
                    "  }",
                    f"  return {{ {a}: {a}.id, {b}: {b}.id, count: items.length }};",
                    "}",
                    "",
                ]
            else:
                lines += [
                    f"func {name}(ctx context.Context, {a} *{a.capitalize()}) ({b.capitalize()}, error) {{",
                    f"\tif {a} == nil {{",
                    f'\t\treturn {b.capitalize()}{{}}, fmt.Errorf("{name}: nil {a}")',
                    "\t}",
                    f"\tout := {b.capitalize()}{{ID: {a}.ID, Count: len({a}.Items)}}",
                    "\treturn out, nil",
                    "}",
                    "",
                ]
        return "\n".join(lines)

    def _prose(self, sentences: int) -> str:
        templates = (
            "{Name} takes the {a} and returns the {b}; nothing else calls it.",
            "The {a} is passed through unchanged, so the {b} comes straight from the caller.",
            "I checked {path}: the {a} handling there matches what the tests expect.",
            "There is no test for an empty {a} yet, which is worth adding later.",
            "{Name} and the {b} loader share the same lookup, so one change covers both.",
            "The {b} is computed twice in {path}; it could be cached, but it is cheap.",
            "Nothing here touches the {a} directly, so this part is safe to leave alone.",
        )
        out = []
        for _ in range(sentences):
            name = self._name()
            text = self._pick(templates).format(
                Name=name, a=self._pick(self.cb.nouns), b=self._pick(self.cb.nouns), path=self._pick(self.cb.files)
            )
            out.append(text)
        return " ".join(out)

    def turn(self, index: int, opening: bool = False) -> ScriptedTurn:
        cb = self.cb
        if opening:
            path = cb.files[0]
            return ScriptedTurn(
                user=f"Let's get started on {self._pick(cb.topics)}. Give me an overview of {path} first.",
                tool=ToolStep("read_file", {"path": path}, self._code(5)),
                reply=self._prose(4),
                work=(WorkEvent(file(path)),),
            )
        roll = self.rng.random()
        path = self._pick(cb.files)
        if roll < 0.35:
            return ScriptedTurn(
                user=f"Open {path} and check how it deals with {self._pick(cb.topics)}.",
                tool=ToolStep("read_file", {"path": path}, self._code(self.rng.randint(3, 7))),
                reply=self._prose(self.rng.randint(2, 4)),
                work=(WorkEvent(file(path)),),
            )
        if roll < 0.55:
            target = path.rsplit("/", 1)[-1].split(".")[0]
            command_line = cb.test_command.format(target=target)
            passed = self.rng.randint(4, 30)
            lines = [f"$ {command_line}"] + [f"ok   {target} case {k}: {self._name()}" for k in range(1, passed + 1)]
            lines.append(f"{passed} passed in 0.{self.rng.randint(10, 99)}s")
            return ScriptedTurn(
                user=f"Run the tests for {target}.",
                tool=ToolStep("run_command", {"command": command_line}, "\n".join(lines)),
                reply=f"All {passed} tests pass. " + self._prose(1),
                work=(WorkEvent(command(command_line)),),
            )
        if roll < 0.70:
            name = self._name()
            hits = [
                f"{self._pick(cb.files)}:{self.rng.randint(5, 400)}: {name}({self._pick(cb.nouns)})" for _ in range(6)
            ]
            return ScriptedTurn(
                user=f"Where is {name} used?",
                tool=ToolStep("grep", {"pattern": name}, "\n".join(hits)),
                reply=f"{name} has {len(hits)} call sites. " + self._prose(2),
            )
        if roll < 0.85:
            old, new = self._name(), self._name()
            return ScriptedTurn(
                user=f"Rename {old} to {new} in {path}.",
                tool=ToolStep("edit_file", {"path": path, "old": old, "new": new}, f"Applied 1 edit to {path}."),
                reply=f"Renamed {old} to {new} in {path}. " + self._prose(1),
                work=(WorkEvent(file(path), CHANGES),),
            )
        return ScriptedTurn(
            user=f"What do you think of {self._pick(cb.topics)} in {path}?",
            reply=self._prose(self.rng.randint(4, 7)),
        )


def _facts(*facts: Fact) -> tuple[Fact, ...]:
    kinds = {f.kind for f in facts}
    assert kinds == set(KINDS), f"a scenario plants every kind: missing {set(KINDS) - kinds}"
    assert sum(1 for f in facts if f.artifact) >= 3, "a scenario plants at least three tool-result artifacts"
    return facts


_BILLING = Scenario(
    name="billing",
    title="Invoice rounding bug and refund rework in a Python billing service",
    turns=200,
    work_gated=TRAIL_GATE,
    system=(
        "You are a coding agent working in the billing-service repository (Python 3.12, pytest). "
        "Keep replies short: one or two sentences."
    ),
    source=Codebase(
        language="python",
        files=(
            "billing/invoices.py",
            "billing/totals.py",
            "billing/tax.py",
            "billing/customers.py",
            "billing/ledger.py",
            "billing/discounts.py",
            "billing/export.py",
            "tests/test_invoices.py",
            "tests/test_totals.py",
            "tests/test_ledger.py",
        ),
        test_command="pytest -q tests/test_{target}.py",
        nouns=("invoice", "customer", "ledger", "line", "discount", "tax", "period", "statement", "credit", "order"),
        verbs=("compute", "load", "apply", "format", "merge", "validate", "split", "render", "post", "close"),
        topics=("tax rounding", "discount stacking", "ledger posting", "statement export", "credit notes"),
    ),
    facts=_facts(
        Fact(
            "api-signatures",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "the public function signatures in billing/api.py must not change, other teams import them.",
            "public function signatures",
            "Which module's public function signatures must not change?",
            "billing/api.py",
            0.03,
            "One rule before you touch anything:",
        ),
        Fact(
            "retry-limit",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "keep the payment gateway retry limit at 3 attempts.",
            "retry limit",
            "What is the payment gateway retry limit?",
            "3",
            0.06,
            "Also, about the gateway client:",
        ),
        Fact(
            "fx-tables",
            KIND_FILE_PATH,
            SOURCE_USER,
            "The currency conversion tables live in billing/fx/rates_2024.csv, not in the database.",
            "currency conversion tables",
            "Where do the currency conversion tables live?",
            "billing/fx/rates_2024.csv",
            0.15,
            "You will need the exchange rates soon.",
        ),
        Fact(
            "account",
            KIND_IDENTIFIER,
            SOURCE_USER,
            "the failing customer account is ACCT-88213.",
            "failing customer account",
            "What is the id of the failing customer account?",
            "ACCT-88213",
            0.21,
            "Support sent me the customer who reported it:",
        ),
        Fact(
            "refund-error",
            KIND_ERROR,
            SOURCE_TOOL,
            "E   decimal.InvalidOperation: DivisionUndefined raised in prorate_refund (billing/refunds.py:88)",
            "prorate_refund",
            "Which error did prorate_refund raise in the refund tests?",
            "DivisionUndefined",
            0.27,
            "pytest -q tests/test_refunds.py",
            error=error(
                "DivisionUndefined in prorate_refund",
                where=(Needle("billing/refunds.py:88", PATH),),
                what=(Needle("DivisionUndefined"),),
            ),
        ),
        Fact(
            "proration-file",
            KIND_FILE_PATH,
            SOURCE_TOOL,
            "billing/refunds/proration_rules.py:17:def prorate_by_days(refund, period):",
            "prorate_by_days",
            "Which file defines prorate_by_days?",
            "billing/refunds/proration_rules.py",
            0.32,
            "def prorate",
            tool="grep",
            before=("billing/invoices.py:40:def prorate_invoice_line(line, days):",),
            after=("billing/refunds/legacy.py:9:def prorate_flat(amount):",),
        ),
        Fact(
            "test-style",
            KIND_PREFERENCE,
            SOURCE_USER,
            "for test style I want pytest.mark.parametrize tables, never loops inside a test.",
            "test style",
            "Which test style does the user prefer?",
            "parametrize",
            0.37,
            "When you add tests, please follow this:",
        ),
        Fact(
            "gateway-request",
            KIND_IDENTIFIER,
            SOURCE_TOOL,
            "2024-03-11T09:14:07Z ERROR gateway refund rejected request_id=req_7Hq2LmX9pT status=402",
            "refund rejected",
            "Which request id did the gateway log for the rejected refund?",
            "req_7Hq2LmX9pT",
            0.42,
            "tail -n 3 logs/gateway.log",
            before=("2024-03-11T09:14:02Z INFO gateway POST /v1/charges status=201",),
            after=("2024-03-11T09:14:09Z INFO gateway POST /v1/charges status=201",),
        ),
        Fact(
            "refund-storage",
            KIND_DECISION,
            SOURCE_ASSISTANT,
            "I will store refund amounts as integer cents in a new refund_cents column.",
            "refund amounts",
            "How did the assistant decide to store refund amounts?",
            "refund_cents",
            0.47,
            "Floats caused the rounding drift, so here is the plan:",
        ),
        Fact(
            "backfill",
            KIND_PENDING,
            SOURCE_USER,
            "after the fix is merged, backfill the March invoices with tools/backfill.py.",
            "backfill",
            "Which backfill is still pending?",
            "March invoices",
            0.55,
            "Do not do this now, but remember it:",
        ),
        Fact(
            "retry-limit-now",
            KIND_REVERSAL,
            SOURCE_USER,
            "Change of plan: the payment gateway retry limit is now 5 attempts, the gateway team asked for it.",
            "retry limit",
            "What is the payment gateway retry limit now?",
            "5",
            0.68,
            "I talked to the gateway team.",
            reverses="retry-limit",
        ),
    ),
)

_FRONTEND = Scenario(
    name="frontend",
    title="Migrating a React dashboard to TypeScript",
    turns=220,
    work_gated=TRAIL_GATE,
    system=(
        "You are a coding agent migrating the ops-dashboard React app to TypeScript (Vite, Vitest). "
        "Keep replies short: one or two sentences."
    ),
    source=Codebase(
        language="typescript",
        files=(
            "src/App.tsx",
            "src/pages/Overview.tsx",
            "src/pages/Alerts.tsx",
            "src/charts/LineChart.tsx",
            "src/charts/BarChart.tsx",
            "src/api/client.ts",
            "src/hooks/usePolling.ts",
            "src/store/filters.ts",
            "src/utils/format.ts",
            "src/utils/range.ts",
        ),
        test_command="npx vitest run {target}",
        nouns=("panel", "series", "alert", "filter", "range", "widget", "metric", "layout", "query", "row"),
        verbs=("build", "render", "select", "parse", "sort", "group", "fetch", "map", "toggle", "resolve"),
        topics=("prop types", "state updates", "API typing", "chart axes", "polling intervals"),
    ),
    facts=_facts(
        Fact(
            "no-any",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "never use the any type; validate values with zod schemas instead.",
            "the any type",
            "What must be used instead of the any type?",
            "zod",
            0.04,
            "A rule for the whole migration:",
        ),
        Fact(
            "node",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "keep the CI node version pinned to Node 18.",
            "node version",
            "Which Node release must the CI node version be?",
            "18",
            0.07,
            "About CI:",
        ),
        Fact(
            "tokens",
            KIND_FILE_PATH,
            SOURCE_USER,
            "The design tokens are in src/theme/tokens.generated.ts and must be regenerated, not edited.",
            "design tokens",
            "Which file holds the design tokens?",
            "src/theme/tokens.generated.ts",
            0.16,
            "Careful with the theme.",
        ),
        Fact(
            "flag",
            KIND_IDENTIFIER,
            SOURCE_USER,
            "The feature flag for the new charts is dash-charts-v2.",
            "feature flag",
            "What is the feature flag for the new charts?",
            "dash-charts-v2",
            0.22,
            "The new charts ship dark.",
        ),
        Fact(
            "legend-error",
            KIND_ERROR,
            SOURCE_TOOL,
            "src/charts/Legend.tsx(41,7): error TS2322: Type 'string' is not assignable to type 'LegendPosition'.",
            "Legend.tsx",
            "Which TypeScript error code did Legend.tsx report?",
            "TS2322",
            0.28,
            "npx tsc --noEmit",
            before=("Found 1 error.", ""),
            after=("", "Process exited with code 2."),
            error=error(
                "TS2322 in Legend.tsx",
                where=(Needle("src/charts/Legend.tsx(41,7)"), Needle("src/charts/Legend.tsx:41", PATH)),
                what=(Needle("TS2322"),),
            ),
        ),
        Fact(
            "theme-hook",
            KIND_FILE_PATH,
            SOURCE_TOOL,
            "src/hooks/chart-theme/useChartTheme.ts:9:export function useChartTheme(mode: ThemeMode): ChartTheme {",
            "useChartTheme",
            "Which file defines useChartTheme?",
            "src/hooks/chart-theme/useChartTheme.ts",
            0.33,
            "export function use.*Theme",
            tool="grep",
            before=("src/hooks/usePolling.ts:3:export function usePollingTheme(): PollTheme {",),
        ),
        Fact(
            "components",
            KIND_PREFERENCE,
            SOURCE_USER,
            "for component style I want function components with named exports, no default exports.",
            "component style",
            "Which component style does the user prefer?",
            "named exports",
            0.37,
            "When you convert components:",
        ),
        Fact(
            "build-id",
            KIND_IDENTIFIER,
            SOURCE_TOOL,
            "deploy-preview failed: build bld_5f3a9c2e exited with code 137 (out of memory)",
            "deploy-preview",
            "Which build id did the failed deploy-preview report?",
            "bld_5f3a9c2e",
            0.42,
            "gh run view --log-failed",
            before=("lint      passed in 41s", "unit      passed in 2m10s"),
            after=("cleanup   skipped",),
        ),
        Fact(
            "dates",
            KIND_DECISION,
            SOURCE_ASSISTANT,
            "for date handling we switch from moment to date-fns, one module at a time.",
            "date handling",
            "Which library did the assistant choose for date handling?",
            "date-fns",
            0.47,
            "moment has no good types and is large, so my choice is this:",
        ),
        Fact(
            "stories",
            KIND_PENDING,
            SOURCE_USER,
            "when the migration is done, write Storybook stories for the ChartTooltip component.",
            "Storybook",
            "Which Storybook work is still pending?",
            "ChartTooltip",
            0.55,
            "Not now, later:",
        ),
        Fact(
            "node-now",
            KIND_REVERSAL,
            SOURCE_USER,
            "Change of plan: the CI node version is now Node 22, the old pin is dropped.",
            "node version",
            "Which Node release must the CI node version be now?",
            "22",
            0.68,
            "Platform upgraded the runners.",
            reverses="node",
        ),
    ),
)

_PIPELINE = Scenario(
    name="pipeline",
    title="Hardening a Go ingestion pipeline",
    turns=160,
    work_gated=TRAIL_GATE,
    system=(
        "You are a coding agent working on the orders ingestion pipeline (Go 1.22). "
        "Keep replies short: one or two sentences."
    ),
    source=Codebase(
        language="go",
        files=(
            "ingest/reader.go",
            "ingest/decoder.go",
            "ingest/writer.go",
            "ingest/metrics.go",
            "ingest/config.go",
            "cmd/ingestd/main.go",
            "internal/store/postgres.go",
            "internal/store/cache.go",
            "ingest/reader_test.go",
            "ingest/writer_test.go",
        ),
        test_command="go test ./ingest/ -run {target}",
        nouns=("record", "offset", "partition", "consumer", "event", "payload", "cursor", "window", "shard", "sink"),
        verbs=("read", "decode", "flush", "commit", "emit", "seek", "drain", "route", "encode", "ack"),
        topics=("offset commits", "shutdown handling", "metrics labels", "config parsing", "write batching"),
    ),
    facts=_facts(
        Fact(
            "prod-topic",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "tests must never write to the production Kafka topic orders.v1.",
            "production Kafka topic",
            "Which production Kafka topic must tests never write to?",
            "orders.v1",
            0.03,
            "Before anything else:",
        ),
        Fact(
            "batch",
            KIND_CONSTRAINT,
            SOURCE_USER,
            "keep the ingest batch size at 500 records.",
            "ingest batch size",
            "What is the ingest batch size?",
            "500",
            0.06,
            "About the writer:",
        ),
        Fact(
            "dlq",
            KIND_FILE_PATH,
            SOURCE_USER,
            "dead-letter records are written to /var/lib/pipeline/dlq, one file per hour.",
            "dead-letter",
            "Where are dead-letter records written?",
            "/var/lib/pipeline/dlq",
            0.15,
            "For the failure handling:",
        ),
        Fact(
            "subject",
            KIND_IDENTIFIER,
            SOURCE_USER,
            "the schema registry subject for orders is orders-value-v7.",
            "schema registry subject",
            "What is the schema registry subject for orders?",
            "orders-value-v7",
            0.21,
            "The decoder needs the schema:",
        ),
        Fact(
            "checksum",
            KIND_ERROR,
            SOURCE_TOOL,
            "panic: checksum mismatch in segment 0042 (ingest/segment.go:133)",
            "checksum mismatch",
            "Which segment did the checksum mismatch panic name?",
            "0042",
            0.28,
            "go test ./ingest/ -run TestReplay",
            before=("=== RUN   TestReplay",),
            after=("FAIL\tgithub.com/acme/orders/ingest\t0.311s",),
            error=error(
                "checksum mismatch in segment 0042",
                where=(Needle("ingest/segment.go:133", PATH),),
                what=(Needle("checksum mismatch", PHRASE),),
            ),
        ),
        Fact(
            "compactor-file",
            KIND_FILE_PATH,
            SOURCE_TOOL,
            "internal/store/compaction/segment_compactor.go:58:func (c *SegmentCompactor) Run(ctx context.Context) error {",
            "SegmentCompactor",
            "Which file defines the SegmentCompactor's Run method?",
            "internal/store/compaction/segment_compactor.go",
            0.33,
            "func .*Run\\(ctx",
            tool="grep",
            before=("ingest/reader.go:21:func (r *Reader) Run(ctx context.Context) error {",),
        ),
        Fact(
            "errors",
            KIND_PREFERENCE,
            SOURCE_USER,
            "for error wrapping use fmt.Errorf with %w, never pkg/errors.",
            "error wrapping",
            "What does the user prefer for error wrapping?",
            "fmt.Errorf",
            0.37,
            "Style note:",
        ),
        Fact(
            "consumer-group",
            KIND_IDENTIFIER,
            SOURCE_TOOL,
            'level=error msg="offset commit failed" consumer_group=ingest-orders-cg3 partition=7',
            "offset commit failed",
            "Which consumer group did the failed offset commit log?",
            "ingest-orders-cg3",
            0.42,
            "kubectl logs deploy/ingestd --tail 3",
            before=('level=info msg="partition assigned" partition=7',),
            after=('level=info msg="retrying" attempt=2',),
        ),
        Fact(
            "backoff",
            KIND_DECISION,
            SOURCE_ASSISTANT,
            "I will make the retry backoff exponential with full jitter, capped at 30 seconds.",
            "retry backoff",
            "What did the assistant decide for the retry backoff?",
            "full jitter",
            0.47,
            "The fixed delay makes every consumer retry at once, so this is the change:",
        ),
        Fact(
            "runbook",
            KIND_PENDING,
            SOURCE_USER,
            "after the release, update the on-call runbook with the new DLQ replay steps.",
            "runbook",
            "What runbook update is still pending?",
            "DLQ replay",
            0.55,
            "One more thing for later:",
        ),
        Fact(
            "batch-now",
            KIND_REVERSAL,
            SOURCE_USER,
            "Change of plan: the ingest batch size is now 2000 records, the database can take it.",
            "ingest batch size",
            "What is the ingest batch size now?",
            "2000",
            0.68,
            "The DBAs came back to me.",
            reverses="batch",
        ),
    ),
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (_BILLING, _FRONTEND, _PIPELINE, LONG)}
#: What runs when ``--scenario`` does not say: the short ones, and the long one once :data:`TRAIL_GATE` is on.
DEFAULT_SCENARIOS: tuple[str, ...] = tuple(SCENARIOS) if TRAIL_GATE else ("billing", "frontend", "pipeline")


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``; ValueError naming the choices otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}: choose one of {', '.join(SCENARIOS)} or all") from None
