"""The docs test's reading of a page: blocks, commands, shown output, marks, classification."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.doc_blocks import UnlabelledShell, doc_files, mark_problem, parse
from tests.docs.test_doc_commands import classify, redirect_target, shown_matches

PAGE = '''# A page

```console
$ broker-lite serve --data-dir var/b --port 10911 \\
      --auto-create-topics         # a comment
$ python -m examples.flask_shop.run migrate
migrated
$ curl -s localhost:8000/x -d '{"a": 1}'
{"id":1,"ref":"..."}
```

```python
print("not shell")
```

<!-- not run: needs a production PostgreSQL -->
```bash
rocketbox migrate --db postgresql+psycopg://app@db/shop
```

```sh
export A=1
# output shown
echo $A

# a lone comment
```

<!-- not run -->
```console
$ rocketbox status --db ...
```
'''


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    return path


@pytest.mark.timeout(30)
def test_blocks_commands_and_shown_output(page: Path) -> None:
    blocks = parse(page)
    assert [(b.lang, b.line) for b in blocks] == [("console", 3), ("bash", 17), ("sh", 21),
                                                  ("console", 30)]
    serve, migrate, curl = blocks[0].commands
    assert serve.text == ("broker-lite serve --data-dir var/b --port 10911 \\\n"
                          "      --auto-create-topics         # a comment")
    assert serve.line == 4 and serve.shown == ()
    assert migrate.shown == ("migrated",)
    assert curl.text == "curl -s localhost:8000/x -d '{\"a\": 1}'"
    assert curl.shown == ('{"id":1,"ref":"..."}',)
    assert [c.text for c in blocks[2].commands] == ["export A=1", "echo $A"]
    assert blocks[2].commands[0].shown == ("output shown",)
    assert blocks[2].commands[1].shown == ()


@pytest.mark.timeout(30)
def test_marks_need_a_reason(page: Path) -> None:
    marks = [b.mark for b in parse(page)]
    assert marks[0] is None and marks[2] is None
    assert marks[1] is not None and mark_problem(marks[1]) is None
    assert marks[3] is not None and "needs" in (mark_problem(marks[3]) or "")
    for bad in (":", ": later", ": needs", ": needs  "):
        assert mark_problem(bad) is not None, bad


@pytest.mark.timeout(30)
def test_a_fence_without_a_language_holding_prompts_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text("```\n$ rocketbox status\n```\n\n```\ntree/\n  file\n```\n")
    with pytest.raises(UnlabelledShell, match="label it"):
        parse(path)


@pytest.mark.timeout(30)
def test_classification() -> None:
    broker, background = classify("broker-lite serve --port 1 > broker.log 2>&1 &")
    assert broker is not None and broker.name == "broker" and background
    relay, background = classify("flask --app examples.flask_shop.wsgi rocketbox relay")
    assert relay is not None and relay.name == "relay" and not background
    web, _ = classify("flask --app examples.flask_shop.wsgi run --port 8000")
    assert web is not None and web.name == "flask web"
    assert classify("flask --app x rocketbox status") == (None, False)
    assert classify("DJANGO_SUPERUSER_PASSWORD=x python -m examples.django_shop.manage \\\n"
                    "  createsuperuser --noinput") == (None, False)
    for unknown in ("make demo", "pip install rocketbox", "rm -rf var", "curl x &"):
        with pytest.raises(AssertionError, match="cannot classify"):
            classify(unknown)
    assert redirect_target("x serve > broker.log 2>&1 &") == "broker.log"
    assert redirect_target("x serve 2>&1 &") is None


@pytest.mark.timeout(30)
def test_shown_output_matching() -> None:
    out = '{"id":1,"ref":"abc","x":2}\n│ Orders │   0 │  1 │\n'
    assert shown_matches(('{"id":1,"ref":"...","x":2}', "...", "│ Orders │ 0 │ 1 │"), out) == []
    assert shown_matches(('{"id":2,"ref":"..."}',), out) == ['{"id":2,"ref":"..."}']


@pytest.mark.timeout(30)
def test_pages_found_include_every_docs_page(tmp_path: Path) -> None:
    for name in ("README.md", "docs/a.md", "docs/new.md", "examples/shop/README.md",
                 "examples/README.md", "docs/sub/skip.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    assert [p.relative_to(tmp_path).as_posix() for p in doc_files(tmp_path)] == [
        "README.md", "docs/a.md", "docs/new.md", "examples/shop/README.md"]


def _run_page(tmp_path: Path, text: str) -> None:
    from tests.docs.doc_session import ShellSession
    from tests.docs.test_doc_commands import PageRun, session_env

    page = tmp_path / "page.md"
    page.write_text(text)
    (tmp_path / "tmp").mkdir()
    env = session_env(tmp_path, tmp_path / "tmp")
    with ShellSession(tmp_path / "session", tmp_path, env) as session:
        run = PageRun(session)
        for block in parse(page):
            for command in block.commands:
                run.command(block, command)


@pytest.mark.timeout(120)
def test_the_runner_keeps_shell_state_and_checks_shown_output(tmp_path: Path) -> None:
    _run_page(tmp_path, "```console\n$ export WHO=docs\n$ mkdir -p sub && cd sub\n"
                        "$ echo \"$WHO in $(basename $PWD)\"\ndocs in sub\n```\n")


@pytest.mark.timeout(120)
def test_the_runner_fails_a_command_that_fails(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="exited 3"):
        _run_page(tmp_path, "```console\n$ python -c 'import sys; sys.exit(3)'\n```\n")


@pytest.mark.timeout(120)
def test_the_runner_fails_output_the_page_does_not_show(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="did not show"):
        _run_page(tmp_path, "```console\n$ echo '{\"id\":2}'\n{\"id\":1}\n```\n")


@pytest.mark.timeout(120)
def test_the_runner_fails_a_server_that_dies_before_it_is_ready(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="ended before it was ready"):
        _run_page(tmp_path, "```console\n$ broker-lite serve --data-dir d --port 0 --bogus\n"
                            "```\n")
