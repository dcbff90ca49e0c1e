"""hdlib's benchmark scripts, one module per benchmark, run from the repository root:

    python -m benchmarks.NAME [--out PATH]      (without --out: benchmarks/results/<this machine>/NAME.json)

Each script writes one results file and owns its tables: `tables(data) -> list[str]` renders the
Markdown of that file, which `python -m scripts.benchmarks_doc` (`make benchmarks-doc`) puts into
docs/benchmarks.md. `hdlib bench`'s results have no script of their own: `bench_tables` renders them.
"""
