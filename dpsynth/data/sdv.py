"""SDV's metadata JSON as a dpsynth schema (issue 32): the format people already have.

SDV single-table metadata (``"METADATA_SPEC_VERSION": "SINGLE_TABLE_V1"``, or one table of a
multi-table file) lists each column's ``sdtype``: numerical, categorical, boolean, datetime and id
map to dpsynth's numeric (integer when ``computer_representation`` is an integer type), categorical,
boolean, datetime (``datetime_format`` kept, its finest field the resolution) and id columns. SDV
metadata holds no bounds or categories (SDV reads them from the data): dpsynth leaves them out, so
a fit releases them privately with a share of the budget (``schema_share``, CLI ``--infer-schema``)
or refuses; declare them in a dpsynth schema to spend nothing on them. SDV metadata does not say
which columns may be missing either: name them (``nullable``). PII sdtypes (email, address, ...)
are refused: dpsynth does not generate them.
"""
from __future__ import annotations

from ..errors import SchemaError
from .schema import Column, Schema

SDTYPES = ("numerical", "categorical", "boolean", "datetime", "id")
#: strftime fields, finest first, and the resolution they imply
_FIELDS = (("%f", "us"), ("%S", "s"), ("%M", "min"), ("%H", "h"), ("%I", "h"))


def is_sdv_metadata(d) -> bool:
    return isinstance(d, dict) and ("METADATA_SPEC_VERSION" in d or "tables" in d or
                                    isinstance(d.get("columns"), dict))


def resolution_of(fmt: str | None) -> str:
    """The resolution a strftime format carries (seconds when there is none: SDV's default parsing)."""
    if fmt is None:
        return "s"
    return next((res for field, res in _FIELDS if field in fmt), "D")


def schema_from_sdv(metadata: dict, *, table: str | None = None, nullable=(), label: str | None = None,
                    label_categories: list | None = None) -> Schema:
    """A :class:`Schema` from SDV metadata. ``table`` picks one table of a multi-table file (needed when it
    has several); ``nullable`` names the columns that may be missing (or True: all but IDs); ``label``
    with ``label_categories`` (public classes, required unless the label is boolean) makes a column the
    label."""
    if not is_sdv_metadata(metadata):
        raise SchemaError("not SDV metadata: expected {\"METADATA_SPEC_VERSION\": ..., \"columns\": {name: "
                          "{\"sdtype\": ...}}} (or a multi-table file with \"tables\").")
    if "tables" in metadata:
        tables = metadata["tables"]
        if table is None and len(tables) != 1:
            raise SchemaError(f"the SDV metadata describes tables {sorted(tables)}; name the one to use (table=...).")
        name = table if table is not None else next(iter(tables))
        if name not in tables:
            raise SchemaError(f"no table {name!r} in the SDV metadata; it has {sorted(tables)}.")
        metadata = tables[name]
    cols = metadata.get("columns") or {}
    other = sorted(n for n, c in cols.items() if c.get("sdtype") not in SDTYPES)
    if other:
        raise SchemaError(f"column(s) {other} have sdtypes {sorted({cols[n].get('sdtype') for n in other})} that "
                          f"dpsynth does not generate (it models {list(SDTYPES)}); remove them from the metadata and "
                          f"drop them from the table (drop_unlisted=True, CLI --drop-unlisted).")
    missing_ok = set(cols) if nullable is True else set(nullable or ())
    unknown = sorted(missing_ok - set(cols))
    if unknown:
        raise SchemaError(f"nullable column(s) {unknown} are not in the SDV metadata.")
    columns = []
    for name, c in cols.items():
        kind, null = c["sdtype"], name in missing_ok and c["sdtype"] != "id"
        if kind == "numerical":
            integer = str(c.get("computer_representation", "Float")).lower().lstrip("u").startswith("int")
            columns.append(Column(name, "numeric", integer=integer, nullable=null))
        elif kind == "categorical":
            columns.append(Column(name, "categorical", nullable=null))
        elif kind == "boolean":
            columns.append(Column(name, "categorical", boolean=True, nullable=null))
        elif kind == "datetime":
            fmt = c.get("datetime_format")
            columns.append(Column(name, "numeric", nullable=null, datetime=resolution_of(fmt), format=fmt))
        else:
            columns.append(Column(name, "id"))
    schema = Schema(columns, source="sdv-metadata")
    return schema.with_label(label, label_categories) if label is not None else schema
