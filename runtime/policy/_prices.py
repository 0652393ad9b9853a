"""What one model call cost in US dollars: a price the user set, else genai-prices' table.

Prices change and differ by provider, so none is kept here: a model the user gave a custom
price (``[prices."MODEL"]`` in ``stowage.toml``) is charged that, any other is looked up in
`genai-prices <https://github.com/pydantic/genai-prices>`_ (the ``cost`` extra), a table that
is kept up to date upstream and knows tiered and dated prices. A model neither knows costs
"unknown", with the reason: never a guessed number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Protocol

from pydantic import Field
from stowage.core import Usage

__all__ = ["COST_EXTRA_HINT", "Charge", "CustomPrice", "PriceBook", "Prices"]

COST_EXTRA_HINT = "pip install 'stowage-runtime[cost]' for genai-prices' table"

#: tokens a price is quoted for
_PER = Decimal(1_000_000)

NonNegative = Annotated[Decimal, Field(ge=0)]


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomPrice:
    """A model's price in US dollars per million tokens: ``input`` (not served from the
    cache), ``output``, and, when the provider bills them apart, ``cached_input`` (read from
    its prompt cache) and ``cache_write`` (written to it). A call that used cached or written
    tokens costs "unknown" when their price is missing."""

    input: NonNegative
    output: NonNegative
    cached_input: NonNegative | None = None
    cache_write: NonNegative | None = None

    def charge(self, model: str, usage: Usage) -> Charge:
        """What ``usage`` costs at this price (unknown when a price it needs is missing).
        Raises nothing."""
        fresh = max(0, usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens)
        usd = fresh * self.input + usage.output_tokens * self.output
        for tokens, price, name in (
            (usage.cached_tokens, self.cached_input, "cached_input"),
            (usage.cache_write_tokens, self.cache_write, "cache_write"),
        ):
            if not tokens:
                continue
            if price is None:
                return Charge(
                    usd=None,
                    source=f"the custom price of {model!r} has no {name}, and {tokens} tokens "
                    f'were billed so: add {name} to [prices."{model}"]',
                )
            usd += tokens * price
        return Charge(usd=usd / _PER, source="custom")


@dataclass(frozen=True, slots=True, kw_only=True)
class Charge:
    """One call's price: ``usd`` (None: unknown) and ``source``, where the price came from
    ("custom", "genai-prices"), or why it is unknown."""

    usd: Decimal | None
    source: str


class PriceBook(Protocol):
    """Prices model calls; ``at`` is the call's ISO-8601 time (prices change)."""

    def charge(self, model: str, usage: Usage, *, at: str | None = None) -> Charge: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Prices:
    """``custom`` prices by model name, then genai-prices' table when ``table`` (and the
    ``cost`` extra is installed). Raises nothing: what it cannot price is unknown, with the
    reason."""

    custom: Mapping[str, CustomPrice] = field(default_factory=dict)
    table: bool = True

    def charge(self, model: str, usage: Usage, *, at: str | None = None) -> Charge:
        price = self.custom.get(model)
        if price is not None:
            return price.charge(model, usage)
        set_one = f'set its price in stowage.toml: [prices."{model}"] input = ..., output = ...'
        if not self.table:
            return Charge(usd=None, source=f"no price for {model!r}: {set_one}")
        table = _price_table()
        if table is None:
            return Charge(
                usd=None, source=f"no price for {model!r}: {set_one}, or {COST_EXTRA_HINT}"
            )
        return _table_charge(table, model, usage, at)


def _price_table() -> Any:
    """genai-prices, or None without the ``cost`` extra (an extra is imported where used)."""
    try:
        import genai_prices
    except ImportError:
        return None
    return genai_prices


def _table_charge(table: Any, model: str, usage: Usage, at: str | None) -> Charge:
    when: datetime | None = None
    if at:
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            when = None  # the table's current price
    counts = table.Usage(
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
    )
    try:
        priced = table.calc_price(counts, model, genai_request_timestamp=when)
    except LookupError:
        return Charge(
            usd=None,
            source=f"{model!r} is not in genai-prices' table: set its price in stowage.toml: "
            f'[prices."{model}"] input = ..., output = ...',
        )
    except ValueError as exc:  # usage its prices cannot split (a unit it needs is missing)
        return Charge(usd=None, source=f"genai-prices cannot price {model!r}: {exc}")
    return Charge(usd=Decimal(priced.total_price), source="genai-prices")
