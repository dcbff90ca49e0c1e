"""The prompts the viz tests give the tiny model (tests/support/tiny.py's words) and how many tokens it answers;
the fixtures `lm` and `truths` (tests/conftest.py) answer them."""

PROMPTS = {"first": "hello world how are you", "second": "you are hello"}
MAX_NEW = 20
