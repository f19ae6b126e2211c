"""Datasets: registry, loaders, schemas, presets and user files."""
from .images import ImageData
from .presets import PRESETS, PresetData, load_preset
from .registry import DATASETS, get_info, is_available, list_datasets, load_dataset
from .schema import Column, Schema, schema_from_sdv
from .tabular import TableData
from .shards import ShardedArrays, ShardedTable
from .sql import read_sql, write_sql
from .user import read_table

__all__ = ["DATASETS", "PRESETS", "Column", "ImageData", "PresetData", "Schema", "ShardedArrays", "ShardedTable",
           "TableData",
           "get_info", "is_available", "list_datasets", "load_dataset", "load_preset", "read_sql", "read_table", "schema_from_sdv",
           "write_sql"]
