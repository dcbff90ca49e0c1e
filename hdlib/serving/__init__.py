"""hdlib inside a serving engine: HD's tiers as vLLM's speculative proposer (`proposer`)."""
