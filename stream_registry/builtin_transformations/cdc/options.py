"""The `debezium` transformation's `transform.options`, parsed and checked (a ValueError names the option)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TRUNCATE_MODES = ("delete", "ignore")
TOAST_PLACEHOLDER = "__debezium_unavailable_value"   # the connector's default unavailable.value.placeholder
DEFAULT_MARK = "debezium"
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000   # delete markers kept a week (by the source's clock)
# the semantic types a schemaless (JSON without schemas) column can be declared as, in `types`
TYPE_NAMES = {"date": "io.debezium.time.Date", "time": "io.debezium.time.Time",
              "micro_time": "io.debezium.time.MicroTime", "nano_time": "io.debezium.time.NanoTime",
              "timestamp": "io.debezium.time.Timestamp", "micro_timestamp": "io.debezium.time.MicroTimestamp",
              "nano_timestamp": "io.debezium.time.NanoTimestamp", "zoned_timestamp": "io.debezium.time.ZonedTimestamp",
              "zoned_time": "io.debezium.time.ZonedTime", "variable_scale_decimal":
              "io.debezium.data.VariableScaleDecimal", "decimal": "org.apache.kafka.connect.data.Decimal"}
_KNOWN = ("tables", "labels", "relationships", "truncate", "mark", "delete_retention_ms", "unavailable_value",
          "types")


@dataclass(frozen=True)
class RelationshipSpec:
    column: str
    type: str
    label: str
    key: str


@dataclass(frozen=True)
class CdcOptions:
    """What the stream mirrors (`tables`: topics or `db.schema.table`/`schema.table`/`db.table`/`table` names;
    required, anything else is skipped) and how."""
    tables: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=dict)
    relationships: Mapping[str, tuple[RelationshipSpec, ...]] = field(default_factory=dict)
    truncate: str = "delete"
    mark: str = DEFAULT_MARK
    delete_retention_ms: int = DEFAULT_RETENTION_MS
    unavailable_value: str = TOAST_PLACEHOLDER
    types: Mapping[str, Mapping[str, tuple[str, int | None]]] = field(default_factory=dict)
    _seen: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)   # answers per table, cached

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> CdcOptions:
        options = dict(options or {})
        unknown = sorted(set(options) - set(_KNOWN))
        if unknown:
            raise ValueError(f"transform.options: unknown key {unknown[0]!r} for debezium (known: "
                             f"{', '.join(_KNOWN)})")
        tables = options.get("tables")
        if (not isinstance(tables, (list, tuple)) or not tables
                or not all(isinstance(t, str) and t for t in tables)):
            raise ValueError(f"transform.options['tables']: expected the list of tables (or topics) this stream "
                             f"mirrors, e.g. [\"inventory.customers\"], got {tables!r}: events of other tables are "
                             f"skipped")
        labels = options.get("labels") or {}
        if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                      for k, v in labels.items()):
            raise ValueError("transform.options['labels']: expected a map of table names to labels")
        truncate = options.get("truncate", "delete")
        if truncate not in TRUNCATE_MODES:
            raise ValueError(f"transform.options['truncate']: expected one of {', '.join(TRUNCATE_MODES)}, "
                             f"got {truncate!r}")
        mark = options.get("mark", DEFAULT_MARK)
        if not isinstance(mark, str) or not mark:
            raise ValueError(f"transform.options['mark']: expected a non-empty text, got {mark!r}")
        retention = options.get("delete_retention_ms", DEFAULT_RETENTION_MS)
        if isinstance(retention, bool) or not isinstance(retention, int) or retention < 0:
            raise ValueError(f"transform.options['delete_retention_ms']: expected milliseconds (an integer >= 0), "
                             f"got {retention!r}")
        placeholder = options.get("unavailable_value", TOAST_PLACEHOLDER)
        if not isinstance(placeholder, str) or not placeholder:
            raise ValueError(f"transform.options['unavailable_value']: expected the connector's "
                             f"unavailable.value.placeholder text, got {placeholder!r}")
        return cls(tables=frozenset(tables), labels=dict(labels), relationships=_relationships(options),
                   truncate=truncate, mark=mark, delete_retention_ms=retention, unavailable_value=placeholder,
                   types=_types(options.get("types") or {}))

    def mirrors(self, names: tuple[str, ...], topic: str) -> bool:
        found = self._seen.get((names, topic))
        if found is None:
            found = self._seen[(names, topic)] = topic in self.tables or any(name in self.tables for name in names)
        return found

    def label(self, names: tuple[str, ...], qualified: str) -> str:
        """The label `labels` gives the table, else `qualified`, its schema-qualified name
        (`inventory.customers`): tables of one name in two schemas (or MySQL databases) are two labels."""
        found = self._seen.get(names)
        if found is None:
            found = self._seen[names] = next((self.labels[name] for name in names if name in self.labels),
                                             qualified)
        return found

    def relationships_of(self, names: tuple[str, ...]) -> tuple[RelationshipSpec, ...]:
        return next((self.relationships[name] for name in names if name in self.relationships), ())

    def types_of(self, names: tuple[str, ...]) -> Mapping[str, tuple[str, int | None]]:
        return next((self.types[name] for name in names if name in self.types), {})


def _relationships(options: Mapping[str, Any]) -> dict[str, tuple[RelationshipSpec, ...]]:
    out: dict[str, tuple[RelationshipSpec, ...]] = {}
    given = options.get("relationships") or {}
    if not isinstance(given, Mapping):
        raise ValueError("transform.options['relationships']: expected a map of tables to "
                         "{column: {type, label, key}}")
    for table, columns in given.items():
        where = f"transform.options['relationships'][{table!r}]"
        if not isinstance(columns, Mapping):
            raise ValueError(f"{where}: expected a map of columns to {{type, label, key}}")
        specs = []
        for column, spec in columns.items():
            if not isinstance(spec, Mapping) or not isinstance(spec.get("label"), str) or not spec.get("label"):
                raise ValueError(f"{where}[{column!r}]: expected {{label, key, type}} (label required)")
            specs.append(RelationshipSpec(column=str(column), label=spec["label"], key=str(spec.get("key") or "id"),
                                          type=str(spec.get("type") or str(column).upper())))
        out[str(table)] = tuple(specs)
    return out


def _types(given: Any) -> dict[str, dict[str, tuple[str, int | None]]]:
    """`{"inventory.products": {"price": "decimal:2", "born": "date"}}`: semantic types of a schemaless stream's
    columns (JSON without schemas carries none)."""
    if not isinstance(given, Mapping):
        raise ValueError("transform.options['types']: expected a map of tables to {column: type}")
    out: dict[str, dict[str, tuple[str, int | None]]] = {}
    for table, columns in given.items():
        if not isinstance(columns, Mapping):
            raise ValueError(f"transform.options['types'][{table!r}]: expected a map of columns to types")
        parsed: dict[str, tuple[str, int | None]] = {}
        for column, text in columns.items():
            name, _, scale = str(text).partition(":")
            if name not in TYPE_NAMES or (scale and not scale.isdigit()) or (name == "decimal") != bool(scale):
                raise ValueError(f"transform.options['types'][{table!r}][{column!r}]: expected one of "
                                 f"{', '.join(sorted(TYPE_NAMES))} (decimal as decimal:SCALE), got {text!r}")
            parsed[str(column)] = (TYPE_NAMES[name], int(scale) if scale else None)
        out[str(table)] = parsed
    return out
