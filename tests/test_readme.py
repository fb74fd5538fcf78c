"""The README's Python example must run as written."""

import re
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_readme_python_example_runs():
    text = README.read_text()
    code = re.search(r"## Python example\n\n```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    assert tuple(namespace["predictions"].shape) == (3, 1)
    assert tuple(namespace["embeddings"].shape) == (3, 80)
    assert len(namespace["attention"]) == 12
