"""Tool output as real tools print it (pytest -v, cargo build and test, tsc, eslint, a Python traceback, npm,
jest): the fixtures of the error lines, the noise around them and the work trail (issue 48)."""

from __future__ import annotations

PYTEST_V = """============================= test session starts ==============================
platform linux -- Python 3.12.1, pytest-8.0.0, pluggy-1.4.0 -- /usr/bin/python3
cachedir: .pytest_cache
rootdir: /home/dev/service
collecting ... collected 9 items

tests/test_refunds.py::test_full_refund PASSED                           [ 11%]
tests/test_refunds.py::test_partial_refund PASSED                        [ 22%]
tests/test_refunds.py::test_prorate_by_days FAILED                       [ 33%]
tests/test_refunds.py::test_idempotent_retry FAILED                      [ 44%]
tests/test_refunds.py::test_zero_amount ERROR                            [ 55%]
tests/test_invoices.py::test_rounding PASSED                             [ 66%]
tests/test_invoices.py::test_totals SKIPPED (needs db)                   [ 77%]
tests/test_invoices.py::test_currency XFAIL (known bug)                  [ 88%]
tests/test_invoices.py::test_tax PASSED                                  [100%]

==================================== ERRORS ====================================
______________________ ERROR at setup of test_zero_amount ______________________
    @pytest.fixture
    def ledger():
>       return Ledger.connect(os.environ["LEDGER_URL"])
E       KeyError: 'LEDGER_URL'

tests/conftest.py:12: KeyError
=================================== FAILURES ===================================
____________________________ test_prorate_by_days _____________________________

    def test_prorate_by_days():
>       assert prorate_refund(Decimal("30.00"), days=0) == Decimal("0")
E       decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]

billing/refunds.py:88: InvalidOperation
___________________________ test_idempotent_retry ______________________________

    def test_idempotent_retry():
        first = refund(order, key="k1")
>       assert refund(order, key="k1") is first
E       AssertionError: assert <Refund id=2> is <Refund id=1>

tests/test_refunds.py:41: AssertionError
=========================== short test summary info ============================
FAILED tests/test_refunds.py::test_prorate_by_days - decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]
FAILED tests/test_refunds.py::test_idempotent_retry - AssertionError: assert <Refund id=2> is <Refund id=1>
ERROR tests/test_refunds.py::test_zero_amount - KeyError: 'LEDGER_URL'
============= 2 failed, 4 passed, 1 skipped, 1 xfailed, 1 error in 0.42s =============="""

CARGO = """   Compiling proc-macro2 v1.0.78
   Compiling unicode-ident v1.0.12
   Compiling thiserror v1.0.57
   Compiling error-chain v0.12.4
    Building [=======================>   ] 118/130: syn, serde_derive
   Compiling ledger v0.1.0 (/home/dev/ledger)
warning: unused variable: `scale`
  --> src/money.rs:14:9
   |
14 |     let scale = 100;
   |         ^^^^^ help: if this is intentional, prefix it with an underscore: `_scale`
   |
   = note: `#[warn(unused_variables)]` on by default

error[E0308]: mismatched types
  --> src/money.rs:22:20
   |
22 |     Money { minor: amount * 100.0 }
   |                    ^^^^^^^^^^^^^^ expected `i128`, found `f64`

For more information about this error, try `rustc --explain E0308`.
warning: `ledger` (lib) generated 1 warning
error: could not compile `ledger` (lib) due to 1 previous error; 1 warning emitted"""

CARGO_TEST = """   Compiling ledger v0.1.0 (/home/dev/ledger)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 1.92s
     Running unittests src/lib.rs (target/debug/deps/ledger-3f2a1c)

running 3 tests
test money::tests::adds_minor_units ... ok
test money::tests::rejects_overflow ... FAILED
test money::tests::parses_error_codes ... ok

failures:

---- money::tests::rejects_overflow stdout ----
thread 'money::tests::rejects_overflow' panicked at src/money.rs:58:9:
assertion `left == right` failed
  left: Ok(Money { minor: 0 })
 right: Err(Overflow)

failures:
    money::tests::rejects_overflow

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`"""

TSC = """src/pages/Report.tsx(88,14): error TS2345: Argument of type 'number' is not assignable to parameter of type 'string'.
src/api/client.ts:41:7 - error TS2322: Type 'undefined' is not assignable to type 'Session'.

41       session = undefined;
         ~~~~~~~

Found 2 errors in 2 files.

Errors  Files
     1  src/api/client.ts:41
     1  src/pages/Report.tsx:88"""

ESLINT = """
/home/dev/web/src/components/Chart.tsx
  12:5   error    'legendItems' is assigned a value but never used  @typescript-eslint/no-unused-vars
  40:11  warning  Unexpected any. Specify a different type           @typescript-eslint/no-explicit-any

/home/dev/web/src/hooks/useSession.ts
  7:1  error  React Hook "useEffect" is called conditionally  react-hooks/rules-of-hooks

✖ 3 problems (2 errors, 1 warning)
  1 error and 0 warnings potentially fixable with the `--fix` option.
"""

TRACEBACK = """Traceback (most recent call last):
  File "/home/dev/service/app/main.py", line 42, in <module>
    main()
  File "/home/dev/service/app/main.py", line 38, in main
    handler = RefundHandler(config)
  File "/home/dev/service/billing/handlers.py", line 17, in __init__
    self.limit = int(config["retry_limit"])
ValueError: invalid literal for int() with base 10: 'three'"""

NPM = """⠋ Installing dependencies
⠙ Installing dependencies
⠹ Resolving packages... [=====     ] 50%
added 312 packages, and audited 313 packages in 4s
npm ERR! code ERESOLVE
npm ERR! ERESOLVE unable to resolve dependency tree
npm ERR! Found: react@18.2.0"""

CARGO_OK = """   Compiling ledger v0.1.0 (/home/dev/ledger)
    Finished `dev` profile [unoptimized + debuginfo] target(s) in 2.10s"""

GREP = """src/orders/proration.py:17:def prorate_by_days(refund, period):
src/orders/legacy.py:9:    total = prorate(amount, 1)
tests/test_proration.py:4:from src.orders.proration import prorate_by_days"""

JEST = """ PASS  src/utils/format.test.ts
 FAIL  src/components/Chart.test.tsx
  ● Chart \u203a renders the legend

    expect(received).toBe(expected) // Object.is equality

    Expected: 3
    Received: 2

      at Object.<anonymous> (src/components/Chart.test.tsx:22:31)

Tests:       1 failed, 7 passed, 8 total"""


# -- a coding agent's session, written in any of the three wire formats ----------------------------------------

REFUND_PY = '''"""Refund handling."""
from decimal import Decimal


class RefundHandler:
    def __init__(self, service):
        self.service = service

    def handle(self, batch):
        return [self.service.create(r) for r in batch]


def refund_amount(order, ratio):
    return order.total * ratio
'''

MONEY_RS = """use std::fmt;

pub struct Money {
    pub minor: i128,
}

impl Money {
    pub fn of(amount: i128) -> Self {
        Money { minor: amount }
    }
}

pub fn to_minor_units(value: f64) -> i128 {
    (value * 100.0) as i128
}
"""


def cat_n(text: str, start: int = 1) -> str:
    """A file as Claude Code's Read returns it: ``cat -n`` numbered lines (its arrow form)."""
    return "\n".join(f"{number:6}\u2192{line}" for number, line in enumerate(text.splitlines(), start))


class Session:
    """A coding agent's turns (the user's messages, its text, its tool calls and their results) in one wire
    format, as Claude Code and Codex send them."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.items: list[dict[str, object]] = []
        self.calls = 0

    def user(self, text: str) -> Session:
        self.items.append(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
            if self.fmt == "openai_responses"
            else {"role": "user", "content": text}
        )
        return self

    def say(self, text: str) -> Session:
        if self.fmt == "openai_responses":
            self.items.append(
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
            )
        else:
            self.items.append({"role": "assistant", "content": text})
        return self

    def call(self, name: str, arguments: dict[str, object], result: str, text: str = "") -> Session:
        self.calls += 1
        call_id = f"call_{self.calls:03d}"
        import json

        if self.fmt == "anthropic_messages":
            blocks: list[dict[str, object]] = [{"type": "text", "text": text}] if text else []
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
            self.items.append({"role": "assistant", "content": blocks})
            self.items.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}]}
            )
        elif self.fmt == "openai_chat":
            function = {"name": name, "arguments": json.dumps(arguments)}
            self.items.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                }
            )
            self.items.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            if text:
                self.say(text)
            if name == "apply_patch":  # Codex's patch tool is a custom tool: its input is the patch itself
                self.items.append(
                    {"type": "custom_tool_call", "call_id": call_id, "name": name, "input": arguments["input"]}
                )
                self.items.append({"type": "custom_tool_call_output", "call_id": call_id, "output": result})
            else:
                self.items.append(
                    {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}
                )
                self.items.append({"type": "function_call_output", "call_id": call_id, "output": result})
        return self
