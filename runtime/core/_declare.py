"""How a setting is declared and checked: ``setting(...)`` in a field's ``Annotated`` type holds its
help, flag, where it may be set and its bounds; ``validating`` makes a frozen dataclass of such
fields check every construction (``Declarations``): values that already have their field's type
and keep its bounds are taken as they are, anything else goes through pydantic, built lazily
from the same declarations, which converts what it can and names what it cannot. So reading a
log's recorded settings never imports pydantic."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

from ._errors import ConfigError

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

__all__ = ["Declarations", "PositiveInt", "SettingInfo", "declarations", "setting", "validating"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Bounds:
    """The bounds every value of a setting must keep (None: no such bound)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def given(self) -> dict[str, float]:
        """The bounds set, by name."""
        return {
            key: value
            for key in ("gt", "ge", "lt", "le")
            if (value := getattr(self, key)) is not None
        }


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Declared:
    """What ``setting`` declares beside the type and the default."""

    help: str
    cli: str | None
    cli_value: object
    metavar: str | None
    config: bool
    profile: bool
    bounds: _Bounds


def setting(
    help: str,
    *,
    cli: str | None = None,
    cli_value: object = None,
    metavar: str | None = None,
    config: bool = True,
    profile: bool = False,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> Any:
    """The declaration of one setting: ``help``; ``cli``, its command-line flag (with
    ``cli_value``: a flag that takes no value and sets this one); ``config``: files and
    ``STOWAGE_*`` variables may set it; ``profile``: a ``[models.NAME]`` table may; the bounds
    (``gt``, ``ge``, ``lt``, ``le``) that every value must keep."""
    return _Declared(
        help=help,
        cli=cli,
        cli_value=cli_value,
        metavar=metavar,
        config=config,
        profile=profile,
        bounds=_Bounds(gt=gt, ge=ge, lt=lt, le=le),
    )


PositiveInt = Annotated[int, _Bounds(gt=0)]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SettingInfo:
    """The declaration of one setting, as the command line and the configuration read it."""

    name: str
    #: the field's type, ``X | None`` unwrapped to ``X`` (``optional`` says it was)
    annotation: Any
    optional: bool
    default: Any
    help: str
    cli: str | None
    #: the value a flag without an argument sets (``--no-stream``: False)
    cli_value: Any
    metavar: str | None
    config: bool
    profile: bool
    bounds: dict[str, float]

    @property
    def env(self) -> str | None:
        """The environment variable that sets it, when files and variables may."""
        return f"STOWAGE_{self.name.upper()}" if self.config else None


def _info(field: dataclasses.Field[Any], hint: Any) -> SettingInfo:
    """The declaration of ``field``, whose type hint is ``Annotated[T, setting(...)]``."""
    (declared,) = (meta for meta in hint.__metadata__ if isinstance(meta, _Declared))
    annotation, optional = _unwrapped(hint.__origin__)
    bounds = declared.bounds.given()
    for meta in getattr(annotation, "__metadata__", ()):  # ``PositiveInt`` and kin
        if isinstance(meta, _Bounds):
            bounds.update(meta.given())
    return SettingInfo(
        name=field.name,
        annotation=_bare(annotation),
        optional=optional,
        default=field.default,
        help=declared.help,
        cli=declared.cli,
        cli_value=declared.cli_value,
        metavar=declared.metavar,
        config=declared.config,
        profile=declared.profile,
        bounds=bounds,
    )


def _unwrapped(annotation: Any) -> tuple[Any, bool]:
    args = getattr(annotation, "__args__", ())
    if type(None) in args and len(args) == 2 and not hasattr(annotation, "__metadata__"):
        return next(a for a in args if a is not type(None)), True
    return annotation, False


def _bare(annotation: Any) -> Any:
    return (
        getattr(annotation, "__origin__", annotation)
        if hasattr(annotation, "__metadata__")
        else annotation
    )


_RULES = {
    "greater_than": "> {gt:g}",
    "greater_than_equal": ">= {ge:g}",
    "less_than": "< {lt:g}",
    "less_than_equal": "<= {le:g}",
}


def _described(exc: ValidationError) -> str:
    """One line for the first problem: ``NAME must be RULE, got VALUE``."""
    error = exc.errors()[0]
    name = ".".join(str(part) for part in error["loc"]) or "settings"
    value = error.get("input")
    if error["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"{name} is not a setting (see docs/reference/settings.md, or stowage run --help)"
    rule = _RULES.get(error["type"])
    if rule is not None:
        return f"{name} must be {rule.format(**error.get('ctx', {}))}, got {value!r}"
    message = str(error["msg"])
    message = message.removeprefix("Input should be ").removeprefix("Value error, ")
    return f"{name} must be {message}, got {value!r}"


#: ``_as_given``'s answer for a value only pydantic may judge
_CONVERT: Any = object()

_PATH = type(Path())
_SCALARS = (str, bool, int, float)
_WITHIN: dict[str, Callable[[Any, float], bool]] = {
    "gt": lambda value, bound: value > bound,
    "ge": lambda value, bound: value >= bound,
    "lt": lambda value, bound: value < bound,
    "le": lambda value, bound: value <= bound,
}


def _as_given(info: SettingInfo, value: Any) -> Any:
    """``value`` as pydantic would give it back."""
    if value is None:
        return None if info.optional else _CONVERT
    kind = info.annotation
    origin = typing.get_origin(kind)
    if origin is tuple:
        if typing.get_args(kind) != (str, ...) or type(value) not in (list, tuple):
            return _CONVERT
        return tuple(value) if all(type(item) is str for item in value) else _CONVERT
    if kind is float and type(value) is int and abs(value) < 2**53:
        value = float(value)
    if origin is Literal:
        plain = type(value) is str and value in typing.get_args(kind)
    elif kind is Path:  # a path pydantic keeps as it is, not a PurePath nor a str
        plain = type(value) is _PATH
    else:
        plain = kind in _SCALARS and type(value) is kind
    if not plain:
        return _CONVERT
    within = all(_WITHIN[key](value, bound) for key, bound in info.bounds.items())
    return value if within else _CONVERT


@dataclasses.dataclass(frozen=True, eq=False)
class Declarations:
    """The declared settings of the dataclass ``cls``, and the check of its construction."""

    cls: type[Any]

    @functools.cached_property
    def infos(self) -> tuple[SettingInfo, ...]:
        hints = typing.get_type_hints(self.cls, include_extras=True)
        return tuple(_info(field, hints[field.name]) for field in dataclasses.fields(self.cls))

    @functools.cached_property
    def by_name(self) -> Mapping[str, SettingInfo]:
        return {info.name: info for info in self.infos}

    def validated(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` as the fields take them."""
        taken: dict[str, Any] = {}
        for name, value in values.items():
            info = self.by_name.get(name)
            as_given = _CONVERT if info is None else _as_given(info, value)
            if as_given is _CONVERT:
                return self.converted(values)
            taken[name] = as_given
        return taken

    def converted(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` converted and checked by pydantic. Raises ``ConfigError``."""
        from pydantic import ValidationError

        try:
            return dict(self._pydantic.validate_python(values))
        except ValidationError as exc:
            raise ConfigError(_described(exc)) from None

    @functools.cached_property
    def _pydantic(self) -> TypeAdapter[Any]:
        """A pydantic validator of the fields, made from their declarations."""
        return _pydantic_validator(self.cls.__name__, self.infos)


#: the declarations of each ``validating`` class
_DECLARED: dict[type[Any], Declarations] = {}


def declarations(cls: type[Any]) -> Declarations:
    """The declarations of the ``validating`` class ``cls``."""
    return _DECLARED[cls]


_T = TypeVar("_T")


def validating(cls: type[_T]) -> type[_T]:
    """``cls`` whose construction validates its arguments first (``Declarations.validated``)."""
    assign = cls.__init__
    checked = _DECLARED[cls] = Declarations(cls)

    def __init__(self: Any, **values: Any) -> None:
        assign(self, **checked.validated(values))

    __init__.__doc__ = assign.__doc__
    setattr(cls, "__init__", __init__)  # noqa: B010  # mypy keeps the dataclass's signature
    return cls


def _pydantic_validator(name: str, infos: tuple[SettingInfo, ...]) -> TypeAdapter[Any]:
    from pydantic import ConfigDict, Field, TypeAdapter
    from typing_extensions import TypedDict

    fields: dict[str, Any] = {}
    for info in infos:
        bounds = info.bounds
        kind = info.annotation
        if bounds:
            limits = Field(
                gt=bounds.get("gt"), ge=bounds.get("ge"), lt=bounds.get("lt"), le=bounds.get("le")
            )
            kind = Annotated[kind, limits]
        fields[info.name] = typing.Optional[kind] if info.optional else kind  # noqa: UP045
    declared = cast(Any, TypedDict)(name, fields, total=False)
    # what ``pydantic.with_config`` sets (2.7 and later): the floor, 2.6, reads it as well
    declared.__pydantic_config__ = ConfigDict(extra="forbid")
    return TypeAdapter(declared)
