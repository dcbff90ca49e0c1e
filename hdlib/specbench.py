"""Spec-Bench's question format: reading, tasks, and picking the first K questions of each task.

One JSON object per line: `question_id` (int), `category` (str), `turns` (list of user turns).
The eight MT-bench sub-categories form the task `mt_bench`; the other categories are tasks of their
own. A malformed line stops the reading with its line number: a benchmark over a silently shortened
question set would report numbers for questions nobody chose.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hdlib.errors import HDError

MT_BENCH = frozenset({"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple[str, ...]

    @property
    def task(self) -> str:
        return "mt_bench" if self.category in MT_BENCH else self.category


def load_questions(path: str | Path) -> list[Question]:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise HDError(f"cannot read questions file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise HDError(f"questions file {path} is not UTF-8 text") from None
    questions = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            question = Question(int(row["question_id"]), str(row["category"]), tuple(str(t) for t in row["turns"]))
        except (ValueError, KeyError, TypeError) as e:
            raise HDError(f"{path}, line {number}: not a Spec-Bench question ({type(e).__name__}: {e})") from None
        if not question.turns:
            raise HDError(f"{path}, line {number}: question {question.question_id} has no turns")
        questions.append(question)
    if not questions:
        raise HDError(f"{path} holds no questions")
    return questions


def per_task(questions: Iterable[Question], k: int | None, tasks: Iterable[str] | None = None) -> list[Question]:
    """The first `k` questions of each task (all when k is None), in file order, task by task."""
    wanted = list(tasks) if tasks is not None else sorted({q.task for q in questions}, key=_task_order)
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
