"""Writing a job's tables: one Parquet directory per table under the output directory, replaced on each
run."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame


def write_tables(tables: dict[str, DataFrame], out_dir: str | Path) -> Path:
    """Each table as `<out_dir>/<name>/` (one file: the tables are small summaries); returns the directory."""
    out = Path(out_dir)
    for name, df in tables.items():
        df.coalesce(1).write.mode("overwrite").parquet(str(out / name))
    return out
