"""What the tests share: tiny random models (`tiny`), plain greedy answers on them (`greedy`), tiers
written as a user writes one (`echo`) or that lie on purpose (`oracle`), a step's record made by hand
(`outcome`), hand-made traces and bench results (`hand_traces`, `bench_inputs`, `bench_runs`), the
viz tests' prompts (`tiny_prompts`) and whether SuffixDecoding's engine is installed (`arctic`).
Imported as `support.tiny` and so on: tests/ is on the path (tests/conftest.py)."""
