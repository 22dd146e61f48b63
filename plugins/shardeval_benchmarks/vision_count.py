"""`vision_count`: generated pictures with questions, the `arith` of images.

Shapes of four colours on white, never overlapping (one per cell of a 4×4 grid), and numbers
drawn as seven-segment rectangles (no font, so no FreeType version changes a pixel). Four kinds,
taken in turn (`idx % len(kinds)`), each its own cluster:

- `count`: "How many red shapes are in the image?", a short answer (1-9);
- `digits`: "What number is written in the image?", a short answer (2-4 digits);
- `choice`: which shape appears most often, or what colour the squares are, four options A-D;
- `compare`: two images, "Which image has more circles?", options A (the first) and B (the second).

Problem i depends only on (params, i), so any shard draws its own range alone, and any shard count
gives the same problems. Each image is a palette PNG written by Pillow at a fixed compression
level; its source `gen:vision_count:<spec>` lets a shard's image store draw it again (`draw`).
The fingerprint hashes the generator's version, the params and Pillow's version rather than N
images; the prompt fingerprint's probes hold the digests of real images, so a Pillow that drew
other bytes is caught there.

Short answers are compared as numbers after VQA normalisation ("three" == "3", "4,721" == "4721");
multiple choice reads the letter as VLMs write it, option texts included (extract_choice_vlm).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
import re
from typing import Annotated, Any, Literal

import msgspec

from shardeval.api.benchmark import (
    Benchmark,
    ParamsStruct,
    Problem,
    Score,
    decode_params,
    describe,
    extract_choice_vlm,
    extract_numeric,
    normalize_vqa,
    numbers_equal,
    offer_image_bytes,
    register_generator,
)
from shardeval.api.plugin import UsageError

GENERATOR_VERSION = "vision_count-v1"
Kind = Literal["count", "digits", "choice", "compare"]
KINDS: tuple[Kind, ...] = ("count", "digits", "choice", "compare")
COLOURS = {"red": (214, 39, 40), "green": (44, 160, 44), "blue": (31, 90, 200), "purple": (148, 60, 180)}
SHAPES = ("circle", "square", "triangle", "star")
GRID = 4  # shapes sit one per cell of a GRID × GRID grid, so they never overlap
LETTERS = "ABCD"
PNG_LEVEL = 6
COMPARE_OPTIONS = ["the first image", "the second image"]
# Seven-segment digits: which of the segments a (top), b (upper right), c (lower right), d (bottom),
# e (lower left), f (upper left), g (middle) are lit.
SEGMENTS = {
    "0": "abcdef",
    "1": "bc",
    "2": "abdeg",
    "3": "abcdg",
    "4": "bcfg",
    "5": "acdfg",
    "6": "acdefg",
    "7": "abc",
    "8": "abcdefg",
    "9": "abcdfg",
}
LETTER_ONLY = "Answer with the option's letter."


class VisionCountParams(ParamsStruct):
    n: Annotated[int, msgspec.Meta(ge=0)] = 200
    seed: int = 0
    size: Annotated[int, msgspec.Meta(ge=64, le=2048)] = 224  # pixels per side
    kinds: Annotated[list[Kind], msgspec.Meta(min_length=1)] = msgspec.field(default_factory=lambda: list(KINDS))


# --- scenes: what an image shows, as plain data ------------------------------------------------

Item = tuple[str, str, int, int, int]  # (shape, colour, x, y, side) in pixels


def place(rng: random.Random, size: int, items: list[tuple[str, str]]) -> list[Item]:
    """Each (shape, colour) in a cell of its own, at a random size and offset inside the cell."""
    cell = size / GRID
    cells = rng.sample(range(GRID * GRID), len(items))
    placed = []
    for (shape, colour), c in zip(items, cells):
        side = int(cell * rng.uniform(0.5, 0.8))
        x = int((c % GRID) * cell + rng.uniform(0, cell - side))
        y = int((c // GRID) * cell + rng.uniform(0, cell - side))
        placed.append((shape, colour, x, y, side))
    return placed


def scene(seed: int, size: int, kind: str, idx: int) -> dict[str, Any]:
    """Problem idx of this kind: its question, reference, options and the images' contents."""
    rng = random.Random(f"{GENERATOR_VERSION}:{seed}:{idx}")
    colours = list(COLOURS)
    if kind == "count":
        colour = rng.choice(colours)
        want = rng.randint(1, 9)
        others = [(rng.choice(SHAPES), rng.choice([c for c in colours if c != colour])) for _ in range(rng.randint(0, 6))]
        items = [(rng.choice(SHAPES), colour) for _ in range(want)] + others
        return {
            "question": f"How many {colour} shapes are in the image? Answer with a number.",
            "reference": str(want),
            "images": [place(rng, size, items)],
            "noun": f"{colour} shapes",
        }
    if kind == "digits":
        number = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(1, 3)))
        return {
            "question": "What number is written in the image? Answer with the number.",
            "reference": number,
            "images": [{"digits": number, "colour": rng.choice(colours), "jx": rng.random(), "jy": rng.random()}],
        }
    if kind == "choice":
        if rng.random() < 0.5:  # which shape is most frequent
            answer = rng.choice(SHAPES)
            top = rng.randint(3, 5)
            items = [(answer, rng.choice(colours)) for _ in range(top)]
            for shape in SHAPES:
                if shape != answer:  # fewer of each other shape, and no more shapes than cells
                    items += [(shape, rng.choice(colours)) for _ in range(rng.randint(0, min(top - 1, GRID * GRID - len(items))))]
            question, options = "Which shape appears most often in the image?", rng.sample(SHAPES, len(SHAPES))
        else:  # the colour of the squares
            answer = rng.choice(colours)
            items = [("square", answer) for _ in range(rng.randint(1, 3))]
            items += [(rng.choice(SHAPES[:1] + SHAPES[2:]), rng.choice(colours)) for _ in range(rng.randint(2, 6))]
            question, options = "What colour are the squares in the image?", rng.sample(colours, len(colours))
        rng.shuffle(items)
        lines = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, options))
        return {
            "question": f"{question}\n{lines}\n{LETTER_ONLY}",
            "reference": LETTERS[options.index(answer)],
            "options": options,
            "images": [place(rng, size, items)],
        }
    # compare: two images, which has more circles
    first, second = rng.sample(range(1, 9), 2)
    images = []
    for circles in (first, second):
        items = [("circle", rng.choice(colours)) for _ in range(circles)]
        items += [(rng.choice(SHAPES[1:]), rng.choice(colours)) for _ in range(rng.randint(0, 5))]
        images.append(place(rng, size, items))
    lines = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, COMPARE_OPTIONS))
    question = f"The first image: <image>\nThe second image: <image>\nWhich image has more circles?\n{lines}\n{LETTER_ONLY}"
    return {"question": question, "reference": "A" if first > second else "B", "options": COMPARE_OPTIONS, "images": images}


# --- drawing -----------------------------------------------------------------------------------


def _canvas(size: int) -> tuple[Any, Any]:
    from PIL import Image, ImageDraw  # Pillow only when images are drawn

    image = Image.new("P", (size, size), 0)
    palette = [255, 255, 255]
    for rgb in COLOURS.values():
        palette.extend(rgb)
    image.putpalette(palette)
    return image, ImageDraw.Draw(image)


def _ink(colour: str) -> int:
    return 1 + list(COLOURS).index(colour)


def _shape(draw: Any, shape: str, colour: str, x: int, y: int, side: int) -> None:
    ink = _ink(colour)
    if shape == "circle":
        draw.ellipse([x, y, x + side, y + side], fill=ink)
    elif shape == "square":
        inset = side // 10
        draw.rectangle([x + inset, y + inset, x + side - inset, y + side - inset], fill=ink)
    elif shape == "triangle":
        draw.polygon([(x + side / 2, y), (x + side, y + side), (x, y + side)], fill=ink)
    else:  # a five-pointed star
        cx, cy, outer = x + side / 2, y + side / 2, side / 2
        points = [
            (cx + r * math.sin(k * math.pi / 5), cy - r * math.cos(k * math.pi / 5)) for k, r in zip(range(10), [outer, outer * 0.45] * 5)
        ]
        draw.polygon(points, fill=ink)


def _digits(draw: Any, size: int, spec: dict[str, Any]) -> None:
    number, ink = spec["digits"], _ink(spec["colour"])
    n = len(number)
    height = min(size * 0.36, size * 0.8 / (n * 0.55 + (n - 1) * 0.22))  # all digits fit in 80 % of the width
    width, thick, gap = height * 0.55, max(2.0, height * 0.12), height * 0.22
    total = len(number) * width + (len(number) - 1) * gap
    x0 = (size - total) / 2 + (spec["jx"] - 0.5) * (size - total) * 0.6
    y0 = (size - height) / 2 + (spec["jy"] - 0.5) * (size - height) * 0.6
    half = height / 2
    for i, digit in enumerate(number):
        x = x0 + i * (width + gap)
        bars = {
            "a": (x, y0, x + width, y0 + thick),
            "g": (x, y0 + half - thick / 2, x + width, y0 + half + thick / 2),
            "d": (x, y0 + height - thick, x + width, y0 + height),
            "f": (x, y0, x + thick, y0 + half),
            "b": (x + width - thick, y0, x + width, y0 + half),
            "e": (x, y0 + half, x + thick, y0 + height),
            "c": (x + width - thick, y0 + half, x + width, y0 + height),
        }
        for segment in SEGMENTS[digit]:
            draw.rectangle([round(v) for v in bars[segment]], fill=ink)


def render(size: int, content: Any) -> bytes:
    """One image of a scene as PNG bytes (palette mode, fixed compression: the same bytes each time)."""
    image, draw = _canvas(size)
    if isinstance(content, dict):
        _digits(draw, size, content)
    else:
        for shape, colour, x, y, side in content:
            _shape(draw, shape, colour, x, y, side)
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=PNG_LEVEL, optimize=False)
    return out.getvalue()


def draw(spec: str) -> bytes:
    """The bytes of `gen:vision_count:<spec>`, spec = `<seed>:<size>:<kind>:<idx>:<k>` (image k of problem idx)."""
    seed, size, kind, idx, k = spec.split(":")
    return render(int(size), scene(int(seed), int(size), kind, int(idx))["images"][int(k)])


# --- the benchmark -----------------------------------------------------------------------------


class VisionCountBenchmark(Benchmark):
    """params: n (default 200), seed (0), size (224 px), kinds (default all of count, digits, choice, compare)."""

    name = "vision_count"
    scorer_version = "1"  # bump when score() or its extraction changes
    has_images = True

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = decode_params(params, VisionCountParams, source="benchmark vision_count")
        if len(set(self.params.kinds)) != len(self.params.kinds):
            raise UsageError(f"benchmark vision_count: params.kinds {self.params.kinds} names a kind twice; name each once")
        try:
            import PIL  # noqa: F401
        except ImportError:
            raise UsageError(
                "benchmark vision_count draws its images with Pillow: pip install 'shardeval[images]' (or pip install pillow)"
            ) from None
        register_generator("vision_count", draw)

    def size(self) -> int:
        return self.params.n

    def kind(self, idx: int) -> str:
        return self.params.kinds[idx % len(self.params.kinds)]

    def problem(self, idx: int) -> Problem:
        p, kind = self.params, self.kind(idx)
        plan = scene(p.seed, p.size, kind, idx)
        refs = []
        for k, content in enumerate(plan["images"]):
            png = render(p.size, content)
            spec = f"{p.seed}:{p.size}:{kind}:{idx}:{k}"
            source = f"gen:vision_count:{spec}"  # also its name: any process with this plugin can draw it again
            ref = describe(png, source, source)
            offer_image_bytes(ref, png)
            refs.append(ref)
        metadata = {"kind": kind, **({"options": plan["options"]} if "options" in plan else {})}
        return Problem(
            idx=idx,
            id=f"vision_count-{p.seed}-{idx}",
            prompt=plan["question"],
            reference=plan["reference"],
            cluster=kind,
            metadata=metadata,
            images=refs,
        )

    def fingerprint(self) -> str:
        """The problems are a pure function of (generator version, params) and the Pillow that
        draws them: hash those, not N images (the prompt fingerprint's probes hold real digests)."""
        import PIL

        params = json.dumps(msgspec.to_builtins(self.params), sort_keys=True)
        return "sha256:" + hashlib.sha256(f"{GENERATOR_VERSION}\n{params}\npillow {PIL.__version__}".encode()).hexdigest()

    def check_images(self, limit: int | None, max_bytes: int, where: str) -> None:
        """Known without drawing: compare items have two images, the others one; a PNG is at most
        about one byte per pixel (palette), far under any max_image_bytes for sizes up to 2048."""
        most = 2 if "compare" in self.params.kinds and self.params.n > self.params.kinds.index("compare") else 1
        if limit is not None and most > limit:
            raise UsageError(
                f"{where}: vision_count's compare items have 2 images, more than the service's limit_mm_per_prompt "
                f"image {limit}; raise limit_mm_per_prompt or leave compare out of params.kinds"
            )
        if self.params.size * self.params.size + 65536 > max_bytes:
            super().check_images(limit, max_bytes, where)

    def score(self, problem: Problem, response: str) -> Score:
        options = problem.metadata.get("options")
        if options:
            letter, _ = extract_choice_vlm(response, options)
            return Score(score=float(letter is not None and letter == problem.reference), extracted=letter)
        said = short_answer(response)
        return Score(score=float(numbers_equal(said, problem.reference)), extracted=said)

    # --- the simulator's hooks (shardeval_sim.benchmark_hooks) -------------------------------

    def simulated_reference(self, problem: Problem) -> str:
        """What `simulated_reply` is handed for this problem: the reference with the option texts,
        so a simulated reply may name an option by its text."""
        counted = re.search(r"How many (\w+ shapes)", problem.prompt or "")
        return json.dumps(
            {
                "id": problem.id,
                "answer": problem.reference,
                "options": problem.metadata.get("options"),
                "noun": counted.group(1) if counted else None,
            }
        )

    def simulated_reply(self, reference: str, correct: bool) -> str | None:
        """A reply in one of the forms VLMs use, drawn from the problem: every right one scores 1
        and every wrong one 0, so the simulator's accuracy is the configured one."""
        try:
            item = json.loads(reference)
            answer, options = item["answer"], item["options"]
        except (ValueError, TypeError, KeyError):
            item, answer, options = {}, reference.strip(), None
        pick = int.from_bytes(hashlib.blake2b(f"{reference}\x1f{correct}".encode(), digest_size=4).digest(), "big")
        if options:
            k = LETTERS.index(answer) if correct else (LETTERS.index(answer) + 1 + pick % (len(options) - 1)) % len(options)
            letter, text = LETTERS[k], options[k]
            forms = [
                letter,
                f"({letter})",
                f"{letter}.",
                f"The answer is {letter}.",
                f"**{letter}**",
                f"Answer: {letter}",
                f"<answer>{letter}</answer>",
                f"{letter}. {text}",
                text,
                f"{text[0].upper()}{text[1:]}.",
            ]
            return forms[(pick >> 8) % len(forms)]
        if not answer.isdigit():
            return None
        value = str(int(answer) + (0 if correct else 1))
        spoken = SPOKEN[int(value)] if int(value) < len(SPOKEN) else value
        noun = item.get("noun")
        forms = [
            value,
            spoken,
            f"The answer is {value}.",
            f"#### {value}",
            f"There are {value} {noun}." if noun else f"The number is {value}.",
            f"I count {spoken} {noun}." if noun else f"It reads {value}.",
        ]
        return forms[(pick >> 8) % len(forms)]


SPOKEN = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")  # as normalize_vqa reads them


def short_answer(response: str) -> str | None:
    """The number a short reply gives, after VQA normalisation ("Three." -> "3", "4,721" -> "4721"):
    the whole reply when it is one number, else `#### N`, "the answer is N", `\\boxed{N}` or the last number."""
    said = normalize_vqa(response)
    if said.replace(".", "", 1).isdigit():
        return said
    return extract_numeric(said)[0]
