import sys
from pathlib import Path

# Test helpers (tiny models, prompts) import as plain modules: `from tiny import tiny_llama`.
sys.path.insert(0, str(Path(__file__).parent))
