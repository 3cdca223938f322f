"""PrunerSearch's settings by name (``--set NAME=VALUE``): any field of PrunerConfig or of
FirstRoundConfig, so an ablation of one heuristic needs no code, and a comparison can record
which settings its Pruner runs searched with."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Dict, Mapping, Optional, Sequence, Tuple

from ..errors import UserError
from .config import FirstRoundConfig, PrunerConfig, value_type

CONFIGS = (PrunerConfig, FirstRoundConfig)
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# Fields that are a share of something: from 0 to 1.
FRACTION_SUFFIXES = ("_share", "_prob", "_ratio", "eps_greedy")


def _field_types() -> Dict[str, Tuple[type, type, bool]]:
    """Each setting's name -> (the config that holds it, the type of its value, whether None (the
    target's default) is allowed)."""
    fields = {}
    for config in CONFIGS:
        hints = typing.get_type_hints(config)
        for field in dataclasses.fields(config):
            fields[field.name] = (config, *value_type(hints[field.name]))
    return fields


def setting_value(name: str, value):
    """``value`` (text, as ``--set`` gives it, or a number) cast to the type of the setting ``name``;
    an unknown name or a value the setting cannot take is one UserError line."""
    fields = _field_types()
    if name not in fields:
        raise UserError(f"unknown Pruner setting '{name}'; the settings are the fields of PrunerConfig and "
                        f"FirstRoundConfig: {', '.join(sorted(fields))}")
    _, kind, optional = fields[name]
    if value is None and optional:
        return None
    text = str(value).strip().lower()
    try:
        if kind is bool:
            if text not in TRUE_WORDS + FALSE_WORDS:
                raise ValueError
            cast = text in TRUE_WORDS
        else:
            cast = kind(text) if isinstance(value, str) else kind(value)
            if kind is int and not isinstance(value, str) and cast != value:
                raise ValueError
    except ValueError:
        raise UserError(f"Pruner setting {name} takes {'0 or 1' if kind is bool else kind.__name__ + 's'}, "
                        f"not '{value}'") from None
    if cast < 0 or not math.isfinite(cast):
        raise UserError(f"Pruner setting {name} must be finite and at least 0, got {value}")
    if name.endswith(FRACTION_SUFFIXES) and cast > 1:
        raise UserError(f"Pruner setting {name} is a share, from 0 to 1, got {value}")
    return cast


def parse_settings(items: Sequence[str]) -> Dict[str, object]:
    """``--set NAME=VALUE`` items as a settings dict, each value of its field's type."""
    settings = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UserError(f"--set takes NAME=VALUE (a PrunerConfig or FirstRoundConfig field), not '{item}'")
        settings[name.strip()] = setting_value(name.strip(), value)
    return settings


def pruner_configs(settings: Optional[Mapping[str, object]] = None,
                   first_round: bool = True) -> Tuple[PrunerConfig, Optional[FirstRoundConfig]]:
    """(PrunerConfig, FirstRoundConfig or None without the policy) with ``settings`` over the defaults.
    A first-round setting with the policy off is refused: it would change nothing."""
    settings = {name: setting_value(name, value) for name, value in (settings or {}).items()}
    fields = _field_types()
    chosen = {config: {n: v for n, v in settings.items() if fields[n][0] is config} for config in CONFIGS}
    if chosen[FirstRoundConfig] and not first_round:
        raise UserError(f"--set {', '.join(sorted(chosen[FirstRoundConfig]))}: a first-round setting, and "
                        "--no-first-round switches that policy off")
    return (PrunerConfig(**chosen[PrunerConfig]),
            FirstRoundConfig(**chosen[FirstRoundConfig]) if first_round else None)


def changed_settings(config: PrunerConfig, first_round: Optional[FirstRoundConfig]) -> Dict[str, object]:
    """The settings of ``config`` and ``first_round`` that differ from the defaults (for the round log)."""
    changed = {}
    for given, default in ((config, PrunerConfig()), (first_round, FirstRoundConfig())):
        if given is not None:
            changed.update({f.name: getattr(given, f.name) for f in dataclasses.fields(given)
                            if getattr(given, f.name) != getattr(default, f.name)})
    return changed


def logged_settings(config: PrunerConfig, first_round: Optional[FirstRoundConfig]) -> Dict[str, dict]:
    """The round log's ``settings`` entry: what differs from the defaults, ``first_round: False``
    without the policy; nothing when every setting is the default."""
    changed = changed_settings(config, first_round)
    if first_round is None:
        changed["first_round"] = False
    return {"settings": changed} if changed else {}
