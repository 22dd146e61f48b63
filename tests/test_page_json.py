"""The data a page embeds (shardeval_pages.page.json_for_script): JSON that no `</script>`, `<!--`
or line separator can end or bend, read back by a JSON parser as the same values; numbers a plugin
computed with numpy are the numbers they hold (json.dumps, which it replaced, took numpy's float64);
anything that is not JSON is refused, not written as something else."""

from __future__ import annotations

import json

import pytest

from shardeval_pages.page import json_for_script


def test_hostile_text_cannot_end_the_element_and_reads_back_the_same() -> None:
    data = {"name": "</script><!-- & \u2028\u2029 <b>", "values": [0.1, 1e-05, 1e22, -0.0, None, True, 3]}
    text = json_for_script(data)
    assert not any(bad in text for bad in ("</", "<!--", "&", "\u2028", "\u2029"))
    assert json.loads(text) == data


def test_numpy_scalars_are_the_numbers_they_hold() -> None:
    np = pytest.importorskip("numpy")
    text = json_for_script({"value": np.float64(0.25), "n": np.int64(7), "complete": np.bool_(True), "low": np.float32(0.5)})
    assert json.loads(text) == {"value": 0.25, "n": 7, "complete": True, "low": 0.5}


def test_what_is_not_json_is_refused() -> None:
    with pytest.raises(TypeError, match="not JSON"):
        json_for_script({"value": object()})
