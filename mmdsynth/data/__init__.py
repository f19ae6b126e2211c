"""Datasets: registry, loaders, schemas, presets and user files."""
from .images import ImageData
from .presets import PRESETS, PresetData, load_preset
from .relational import DatabaseSchema, read_database, root_ids
from .registry import DATASETS, get_info, is_available, list_datasets, load_dataset
from .schema import Column, Schema, schema_from_sdv
from .tabular import TableData
from .shards import ShardedArrays, ShardedTable
from .sql import read_sql, write_sql
from .user import read_table

__all__ = ["DATASETS", "PRESETS", "Column", "DatabaseSchema", "ImageData", "PresetData", "Schema", "ShardedArrays", "ShardedTable",
           "TableData",
           "get_info", "is_available", "list_datasets", "load_dataset", "load_preset", "read_database", "read_sql", "read_table", "root_ids", "schema_from_sdv",
           "write_sql"]
