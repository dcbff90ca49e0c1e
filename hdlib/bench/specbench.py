"""Spec-Bench's question format: reading, tasks, and picking the first K questions of each task.

One JSON object per line: `question_id` (int), `category` (str), `turns` (list of user turns).
The eight MT-bench sub-categories form the task `mt_bench`; the other categories are tasks of their
own. A malformed line (not JSON, a field missing or of the wrong type, no turns, an empty turn, a
`question_id` seen before) is named by its line number. By default it stops the reading; with
`on_bad_line` (what `hdlib bench` does) each bad line is reported through it and skipped, so a run
is never shortened silently, and a file left with no question at all is refused.

The splits (`split`): within each category, in file order, the first half of its questions
(rounded down) is the dev half, for choosing constants; of the rest, each task's last 9 in 40
(`SEALED_SHARE`, rounded down) are the sealed split, and the others the report split, for the
numbers the docs show. On Spec-Bench's 480 questions that is 240 dev (40 of each task's 80;
MT-bench's eight categories give 5 of their 10 each), 186 report and 54 sealed, 9 of each task: the
first questions of every task, on which hdlib's constants were chosen before the split existed, are
dev questions, and the sealed ones are the only questions that no result committed before the
sealed split existed had asked (the served runs had taken the report questions from each task's
start). The sealed split is for one thing: a comparison written as a plan first (its methods,
questions, repeats, measures and the rule its verdicts follow, committed), then run once, at the end
of a piece of work, and reported as it came out; nothing is chosen or tuned on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hdlib.errors import HDError

MT_BENCH = frozenset({"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
SPLITS = ("dev", "report", "sealed")
SEALED_SHARE = (9, 40)  # of each task's non-dev questions, the last 9 in 40 are sealed: Spec-Bench's 9 of 40


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple[str, ...]

    @property
    def task(self) -> str:
        return "mt_bench" if self.category in MT_BENCH else self.category


def load_questions(path: str | Path, on_bad_line: Callable[[str], None] | None = None) -> list[Question]:
    """The questions of a Spec-Bench file, in file order.

    A bad line raises HDError, or, when `on_bad_line` is given, is passed to it as one message
    ("PATH, line N: why") and skipped. No valid question at all raises HDError either way.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise HDError(f"cannot read questions file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise HDError(f"questions file {path} is not UTF-8 text") from None
    questions: list[Question] = []
    seen: dict[int, int] = {}  # question_id -> line number
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            question = parse_question(line)
            if question.question_id in seen:
                raise ValueError(f"question_id {question.question_id} repeats line {seen[question.question_id]}")
        except (ValueError, TypeError) as e:
            message = f"{path}, line {number}: not a Spec-Bench question ({e})"
            if on_bad_line is None:
                raise HDError(message) from None
            on_bad_line(message)
            continue
        seen[question.question_id] = number
        questions.append(question)
    if not questions:
        raise HDError(f"{path} holds no valid question")
    return questions


def parse_question(line: str) -> Question:
    """One line of the file; ValueError or TypeError says what is wrong with it."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(row, dict):
        raise TypeError(f"a JSON object is needed, got {type(row).__name__}")
    missing = [key for key in ("question_id", "category", "turns") if key not in row]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    qid, category, turns = row["question_id"], row["category"], row["turns"]
    if not isinstance(qid, int) or isinstance(qid, bool):
        raise TypeError(f"question_id must be an integer, got {qid!r}")
    if not isinstance(category, str) or not category:
        raise TypeError(f"category must be a non-empty string, got {category!r}")
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise TypeError("turns must be a list of strings")
    if not turns:
        raise ValueError(f"question {qid} has no turns")
    if not all(t.strip() for t in turns):
        raise ValueError(f"question {qid} has an empty turn")
    return Question(qid, category, tuple(turns))


def per_task(questions: Iterable[Question], k: int | None, tasks: Iterable[str] | None = None) -> list[Question]:
    """The first `k` questions of each task (all when k is None, only `tasks` when given), in file
    order, task by task in Spec-Bench's order."""
    named = set(tasks) if tasks is not None else {q.task for q in questions}
    wanted = sorted(named, key=lambda t: (_task_order(t), t))  # unknown ones last, by name
    unknown = [t for t in wanted if t not in TASKS]
    if unknown:
        raise HDError(f"unknown task(s) {unknown}: choose from {', '.join(TASKS)}")
    chosen = []
    for task in wanted:
        of_task = [q for q in questions if q.task == task]
        chosen.extend(of_task if k is None else of_task[:k])
    return chosen


def _task_order(task: str) -> int:
    return TASKS.index(task) if task in TASKS else len(TASKS)


def split(questions: Sequence[Question], half: str) -> list[Question]:
    """The split `half` ("dev", "report" or "sealed") of `questions`, in file order: per category, the
    first half of its questions (rounded down) is dev; of the rest, per task, the last 9 in 40
    (rounded down) are sealed, the others report (see the module docstring)."""
    if half not in SPLITS:
        raise HDError(f"unknown split {half!r}: choose from {', '.join(SPLITS)}")
    by_category: dict[str, list[Question]] = {}
    for q in questions:
        by_category.setdefault(q.category, []).append(q)
    dev = {q.question_id for group in by_category.values() for q in group[: len(group) // 2]}
    rest: dict[str, list[int]] = {}
    for q in questions:
        if q.question_id not in dev:
            rest.setdefault(q.task, []).append(q.question_id)
    sealed_n, of = SEALED_SHARE
    sealed = {i for ids in rest.values() for i in ids[len(ids) - len(ids) * sealed_n // of :]}
    found = {"dev": dev, "sealed": sealed}.get(half)
    if found is None:  # report: neither
        return [q for q in questions if q.question_id not in dev and q.question_id not in sealed]
    return [q for q in questions if q.question_id in found]
