"""The engine: one generation's loop and the parts it runs at every step.

`loop` (the `Decoder`: propose, verify, accept, update) drives `drafter` (ask the tiers in order,
merge their drafts into a `tree`), a budget policy (`budget`'s fixed budget, or `value`'s
value-ranked tree with the hierarchy's `gate`, weighed against `forward_time`), `verifier` (one
forward pass over the tree through the `cache`, the model's `choices` and `sampling`'s acceptance
rules), and `trace`, the records a generation leaves behind. Nothing here opens a database or loads
a model by name: `hdlib.generate` does that, above the engine.
"""
