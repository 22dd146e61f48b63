"""Every request body shardeval sends for an image benchmark is one vLLM's server accepts.

One `shardeval run` against the simulator, behind a recording proxy, asks for three image
benchmarks: bring-your-own JSONL rows (one image per marker, several markers, none, pictures in
each format Pillow writes for the web, a system turn, sampling parameters), a `custom` multiple
choice benchmark whose rows carry data: URLs, and the JSONL rows again through a service that
declares `allowed_local_media_path` (file:// URLs, file names that need quoting). Every body
recorded then goes, in ONE process of the vLLM venv's python (importing vLLM takes ~5 s of CPU),
through tests/vllm_validate_bodies.py: vLLM's `ChatCompletionRequest`, its per-part parser and its
`MediaConnector` (the image decoded as the server would, built with the same allowed path). A few
spoiled copies go with them and must fail, so the check is seen to be able to.

Skipped where the vLLM venv is not built (scripts/setup/vllm.sh; see tests/vllm_real.py).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from conftest import REPO, running_sim, shardeval_cmd
from served import Recording, recording_proxy
from vllm_real import vllm_paths

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageDraw  # noqa: E402

pytestmark = pytest.mark.timeout(300)

VALIDATOR = os.path.join(REPO, "tests", "vllm_validate_bodies.py")
LIMIT = 4  # the services' limit_mm_per_prompt image, and the validator's --limit-image
FAST = ("--ttft-ms", "0", "--itl-ms", "0")
# (file name, Pillow mode, format): what a data set may hold; vLLM sniffs the format itself.
PICTURES = [
    ("red.png", "RGB", "PNG"),
    ("alpha.png", "RGBA", "PNG"),
    ("grey.png", "L", "PNG"),
    ("palette.gif", "P", "GIF"),
    ("photo.jpg", "RGB", "JPEG"),
    ("web.webp", "RGB", "WEBP"),
    ("two words #1 é.png", "RGB", "PNG"),
]


def picture(path: Path, mode: str, fmt: str, n: int) -> None:
    im = Image.new("RGB", (40 + n, 32), "white")
    ImageDraw.Draw(im).rectangle((4, 4, 10 + 3 * n, 20), fill=(200, 20 * n, 40))
    im.convert(mode).save(path, format=fmt)


def write_data(tmp: Path) -> dict[str, Path]:
    """The JSONL rows (paths beside the file) and a `custom` multiple-choice mapping (data: URLs)."""
    img = tmp / "img"
    img.mkdir()
    for n, (name, mode, fmt) in enumerate(PICTURES):
        picture(img / name, mode, fmt, n)
    rows = [
        {"id": f"one-{name}", "question": f"What is drawn in {name}? <image> Answer briefly.", "answer": "a box", "images": [f"img/{name}"]}
        for name, _, _ in PICTURES
    ]
    rows += [
        {
            "id": "three",
            "question": "<image> then <image> and last <image>: which is widest?",
            "answer": "last",
            "images": ["img/red.png", "img/photo.jpg", "img/web.webp"],
        },
        {"id": "unmarked", "question": "How many boxes?", "answer": "2", "images": ["img/grey.png", "img/alpha.png"]},
        {
            "id": "at-limit",
            "question": "<image><image><image><image> Same?",
            "answer": "no",
            "images": [f"img/{name}" for name, _, _ in PICTURES[:LIMIT]],
        },
    ]
    vqa = tmp / "vqa.jsonl"
    vqa.write_text("".join(json.dumps(r) + "\n" for r in rows))

    import base64

    def data_url(name: str) -> str:
        return "data:image/png;base64," + base64.b64encode((img / name).read_bytes()).decode()

    mc_rows = [
        {"q": "Which colour fills the box? <image>", "options": ["red", "green", "blue"], "answer": "A", "images": [data_url(name)]}
        for name in ("red.png", "grey.png")
    ]
    (tmp / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mc_rows))
    mc = tmp / "mc.yaml"
    mc.write_text(
        "name: mc\ndata: mc.jsonl\nfields: {input: q, choices: options, target: answer}\n"
        'prompt: "{input}\\n{choices}\\nAnswer with the letter."\nsystem_prompt: Look closely.\nscorer: choice\n'
    )
    return {"vqa": vqa, "mc": mc, "img": img}


def run_config(tmp: Path, url: str, data: dict[str, Path]) -> Path:
    service = {"type": "api", "url": url, "model": "sim", "limit_mm_per_prompt": {"image": LIMIT}}
    generation = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "stop": ["\n\n"]}
    config = {
        "services": {"model": service, "files": {**service, "allowed_local_media_path": str(data["img"])}},
        "benchmarks": [
            {"name": str(data["vqa"]), "repeats": 2, "solver": {"system_prompt": "You see images.", "generation": generation}},
            {"name": str(data["mc"])},
            {"name": str(data["vqa"]), "id": "vqa_files", "solver": {"service": "files"}},
            {"name": "vision_count", "params": {"n": 8}},  # the built-in: drawn images, one and two per prompt
        ],
        "seed": 3,
        "output": {"dir": str(tmp / "out"), "progress_interval_s": 0},
    }
    path = tmp / "run.yaml"
    path.write_text(json.dumps(config))
    return path


def image_urls(body: dict[str, Any]) -> list[str]:
    return [
        p["image_url"]["url"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]


def spoiled(bodies: list[dict[str, Any]], outside: Path) -> dict[str, dict[str, Any]]:
    """Copies of a sent body, each with one thing vLLM refuses (the check must be able to fail)."""
    body = next(b for b in bodies if image_urls(b) and image_urls(b)[0].startswith("data:"))

    def with_first_image(change: Any) -> dict[str, Any]:
        copied = copy.deepcopy(body)
        part = next(p for p in copied["messages"][-1]["content"] if p["type"] == "image_url")
        change(part)
        return copied

    return {
        # lets ChatCompletionRequest through (its parts are lax TypedDicts): the part parser refuses it
        "bare string": with_first_image(lambda p: p.update(image_url=p["image_url"]["url"])),
        "not a picture": with_first_image(lambda p: p["image_url"].update(url="data:image/png;base64,aGVsbG8gd29ybGQ=")),
        "outside the folder": with_first_image(lambda p: p["image_url"].update(url=f"file://{outside}")),
        "over the limit": {
            **body,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_urls(body)[0]}}] * (LIMIT + 1)}],
        },
    }


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The run's bodies, the spoiled ones, and the validator's verdict on each (one subprocess)."""
    paths = vllm_paths()
    if paths is None:
        pytest.skip("no CPU vLLM here: run scripts/setup/vllm.sh (its venv's python validates the bodies)")
    tmp = tmp_path_factory.mktemp("bodies")
    data = write_data(tmp)
    # the simulator reads the file:// images only under its own --allowed-local-media-path, as vLLM does
    with running_sim(*FAST, "--allowed-local-media-path", str(data["img"])) as sim, recording_proxy(sim, Recording("")) as rec:
        result = shardeval_cmd("run", str(run_config(tmp, rec.url, data)), "--shard", "0/1", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    sent = list(rec.bodies)
    outside = tmp / "outside.png"
    picture(outside, "RGB", "PNG", 1)
    bad = spoiled(sent, outside)
    lines = "".join(json.dumps(b) + "\n" for b in [*sent, *bad.values()])
    done = subprocess.run(
        [paths[0], VALIDATOR, "--allowed-local-media-path", str(data["img"]), "--limit-image", str(LIMIT)],
        input=lines,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1", "VLLM_NO_USAGE_STATS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    header, *verdicts = [json.loads(line) for line in done.stdout.splitlines()]
    assert [v["line"] for v in verdicts] == list(range(1, len(sent) + len(bad) + 1)), done.stdout[-3000:]
    yield {
        "sent": sent,
        "header": header,
        "verdicts": verdicts[: len(sent)],
        "bad": dict(zip(bad, verdicts[len(sent) :])),
        "img": data["img"],
    }


def test_every_body_sent_validates_against_vllms_request_model(checked: dict[str, Any]) -> None:
    sent, verdicts = checked["sent"], checked["verdicts"]
    # 10 rows x 2 repeats, 2 multiple-choice rows, 10 rows through the file:// service
    assert len(sent) == 10 * 2 + 2 + 10 + 8  # vqa twice, mc, vqa as files, vision_count
    refused = [(v, sent[v["line"] - 1]["messages"][-1]["content"][0]) for v in verdicts if not v["ok"]]
    assert not refused, refused[:3]
    assert (
        sum(v["images"] for v in verdicts) == sum(len(image_urls(b)) for b in sent) == (7 + 3 + 2 + LIMIT) * 3 + 2 + 10
    )  # vision_count: 6 one-image problems, 2 compare pairs
    assert max(v["images"] for v in verdicts) == LIMIT
    # vLLM 0.32's private part parser (vllm/renderers/chat_utils.py `_parse_chat_message_content_mm_part`)
    # was used beside openai's public part types; where a later vLLM moves it, the public ones stand alone.
    assert "openai" in checked["header"]["part_parsers"]
    if checked["header"]["vllm"] == "0.32.0":
        assert checked["header"]["part_parsers"] == ["vllm", "openai"]


def test_the_bodies_cover_markers_system_turns_and_both_url_forms(checked: dict[str, Any]) -> None:
    """What the validation above covered: not only one easy shape."""
    sent = checked["sent"]
    shapes = {tuple(p["type"] for p in b["messages"][-1]["content"]) for b in sent}
    assert ("image_url", "text", "image_url", "text", "image_url", "text") in shapes  # three markers, the first leading
    assert ("image_url",) * LIMIT + ("text",) in shapes  # adjacent markers: no empty text between
    assert ("image_url", "image_url", "text") in shapes  # no marker: images first
    assert any(b["messages"][0]["role"] == "system" and isinstance(b["messages"][0]["content"], str) for b in sent)
    urls = [u for b in sent for u in image_urls(b)]
    files = {u for u in urls if u.startswith("file://")}
    assert len(files) == len(PICTURES) and any("%20" in u and "%23" in u for u in files)  # quoted, and vLLM read it back
    assert len([b for b in sent if len(image_urls(b)) == 2 and "The first image" in json.dumps(b)]) >= 1  # its compare kind
    mimes = {u.split(";", 1)[0] for u in urls if u.startswith("data:")}
    assert mimes == {"data:image/png", "data:image/gif", "data:image/jpeg", "data:image/webp"}


@pytest.mark.parametrize(
    "case, error",
    [
        ("bare string", "Input should be a valid dictionary"),
        ("not a picture", "Failed to load image"),
        ("outside the folder", "must be a subpath of `--allowed-local-media-path"),
        ("over the limit", f"{LIMIT + 1} images, over --limit-image {LIMIT}"),
    ],
)
def test_a_spoiled_body_is_refused(checked: dict[str, Any], case: str, error: str) -> None:
    verdict = checked["bad"][case]
    assert not verdict["ok"] and error in verdict["error"], verdict
