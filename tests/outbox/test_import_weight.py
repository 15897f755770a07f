"""``import outbox`` stays light (issue 30): the heavy optional parts load where they are used.

Each check runs in a fresh interpreter, so modules other tests imported do not hide a
regression. The names come from ``outbox.__all__``: touching every public name must not
load them either, only the code that needs them (the RocketMQ target, the Celery app,
``rocketbox status``, the metrics server).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: top-level packages a plain ``import outbox`` (and its public names) must not load
HEAVY = ("grpc", "rocketmq", "celery", "kombu", "prometheus_client", "rich", "google.protobuf")


def loaded_after(code: str) -> list[str]:
    probe = (f"import sys, json\n{code}\n"
             f"print(json.dumps(sorted(n for n in {list(HEAVY)!r} if n in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.timeout(150)
def test_import_outbox_loads_no_heavy_optional_package() -> None:
    assert loaded_after("import outbox") == []


@pytest.mark.timeout(150)
def test_every_public_name_of_outbox_loads_no_heavy_optional_package() -> None:
    assert loaded_after("import outbox\nfor name in outbox.__all__: getattr(outbox, name)") == []


@pytest.mark.timeout(150)
def test_import_outbox_does_not_load_sqlalchemy_until_a_name_is_used() -> None:
    assert loaded_after("import outbox\nassert 'sqlalchemy' not in sys.modules") == []


@pytest.mark.timeout(150)
def test_the_parts_that_need_them_still_load_them() -> None:
    """The probe can fail: the terminal view loads Rich, the metrics load prometheus_client."""
    assert loaded_after("import outbox.status_render") == ["rich"]
    assert loaded_after("from outbox.metrics import observe_checkback\n"
                        "observe_checkback('COMMIT')") == ["prometheus_client"]


@pytest.mark.timeout(150)
def test_publish_stays_the_function_when_its_module_is_imported() -> None:
    """``outbox.publish`` is the function, as before names loaded on first use."""
    code = ("import outbox, outbox.relay, outbox.publish, inspect\n"
            "from outbox import publish\n"
            "assert inspect.isfunction(publish) and inspect.isfunction(outbox.publish)\n"
            "assert publish is sys.modules['outbox.publish'].publish")
    assert loaded_after(code) == []


@pytest.mark.timeout(60)
def test_the_old_render_status_name_still_works_and_says_where_it_moved() -> None:
    import outbox.status_render

    with pytest.warns(DeprecationWarning, match="outbox.status_render.render_status"):
        from outbox.status import render_status
    assert render_status is outbox.status_render.render_status


@pytest.mark.timeout(150)
def test_submodules_are_reached_as_attributes_as_before() -> None:
    """``import outbox`` then ``outbox.models.metadata``: the eager imports used to bind
    the submodules; a name outbox lacks is still an AttributeError."""
    code = ("import outbox\n"
            "assert outbox.models.metadata is outbox.metadata\n"
            "assert not hasattr(outbox, 'no_such_name')")
    assert loaded_after(code) == []
