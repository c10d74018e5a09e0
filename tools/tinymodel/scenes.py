"""The synthetic world: coloured shapes on varied backgrounds, and queries about them in
LocateAnything's real templates with answers in its real output grammar.

    rng = random.Random(7)
    scene = make_scene(rng)                   # Scene: PIL image + objects with pixel boxes
    task, query, answer = make_query(rng, scene)
    instruction(task, query)                  # "Locate all the instances that matches ..."

Everything is drawn from the rng passed in, so a seed reproduces a scene exactly.
"""

import dataclasses
import math
import random

from PIL import Image, ImageDraw

COLOURS = {  # name -> base RGB; each object jitters it a little
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (240, 210, 40),
    "purple": (150, 60, 190),
}
SHAPES = ("circle", "square", "triangle", "star")

# Image sizes: the longer side in pixels and the aspect ratio (width / height).
MIN_SIDE, MAX_SIDE = 84, 360
MIN_ASPECT, MAX_ASPECT = 0.5, 2.0
MAX_OBJECTS = 4
# Object size as a fraction of the shorter image side.
MIN_SIZE, MAX_SIZE = 0.16, 0.45

TEMPLATES = {  # engine/prompt's instructions (docs/background.md, "Tasks and query templates")
    "detect": "Locate all the instances that matches the following description: {}.",
    "ground": "Locate all the instances that match the following description: {}.",
    "ground_one": "Locate a single instance that matches the following description: {}.",
    "point": "Point to: {}.",
}
SUPERLATIVES = ("largest", "smallest", "leftmost", "rightmost")


@dataclasses.dataclass
class Obj:
    shape: str
    colour: str
    box: tuple  # x1, y1, x2, y2 in pixels (float), the shape's tight extent

    @property
    def area(self):
        return (self.box[2] - self.box[0]) * (self.box[3] - self.box[1])

    @property
    def centre(self):
        return ((self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2)


@dataclasses.dataclass
class Scene:
    image: Image.Image
    objects: list

    @property
    def size(self):
        return self.image.size


def random_size(rng):
    aspect = math.exp(rng.uniform(math.log(MIN_ASPECT), math.log(MAX_ASPECT)))
    longer = rng.randint(MIN_SIDE + 40, MAX_SIDE)
    if aspect >= 1:
        return longer, max(MIN_SIDE, round(longer / aspect))
    return max(MIN_SIDE, round(longer * aspect)), longer


def _jitter(rgb, rng, amount):
    return tuple(max(0, min(255, c + rng.randint(-amount, amount))) for c in rgb)


def background(rng, w, h):
    """A muted background: flat, gradient, stripes, checks or noise, so the model cannot
    rely on one colour being 'empty'."""
    base = tuple(rng.randint(70, 200) for _ in range(3))
    grey = sum(base) // 3
    base = tuple((c + 2 * grey) // 3 for c in base)  # desaturate: shapes stay the vivid things
    other = _jitter(base, rng, 45)
    kind = rng.choice(("flat", "gradient", "stripes", "checks", "noise"))
    img = Image.new("RGB", (w, h), base)
    d = ImageDraw.Draw(img)
    if kind == "gradient":
        vertical = rng.random() < 0.5
        n = h if vertical else w
        for i in range(n):
            t = i / max(1, n - 1)
            c = tuple(round(a + (b - a) * t) for a, b in zip(base, other))
            d.line([(0, i), (w, i)] if vertical else [(i, 0), (i, h)], fill=c)
    elif kind == "stripes":
        step = rng.randint(6, 20)
        for i in range(-h, w + h, 2 * step):
            d.polygon([(i, 0), (i + step, 0), (i + step + h, h), (i + h, h)], fill=other)
    elif kind == "checks":
        step = rng.randint(8, 24)
        for y in range(0, h, step):
            for x in range(0, w, step):
                if (x // step + y // step) % 2:
                    d.rectangle([x, y, x + step - 1, y + step - 1], fill=other)
    elif kind == "noise":
        small = Image.new("RGB", (max(1, w // 6), max(1, h // 6)))
        small.putdata([_jitter(base, rng, 35) for _ in range(small.width * small.height)])
        img = small.resize((w, h), Image.NEAREST)
    return img


def shape_polygon(shape, x1, y1, s):
    """Outline points of a polygonal shape in the box (x1, y1, x1+s, y1+s)."""
    if shape == "square":
        return [(x1, y1), (x1 + s, y1), (x1 + s, y1 + s), (x1, y1 + s)]
    if shape == "triangle":
        return [(x1 + s / 2, y1), (x1 + s, y1 + s), (x1, y1 + s)]
    if shape == "star":
        cx, cy, pts = x1 + s / 2, y1 + s / 2, []
        for k in range(10):
            r = s / 2 if k % 2 == 0 else s / 5
            a = -math.pi / 2 + k * math.pi / 5
            pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
        return pts
    raise ValueError(f"no polygon for {shape}")


def tight_box(shape, x1, y1, s):
    if shape == "circle":
        return (x1, y1, x1 + s, y1 + s)
    pts = shape_polygon(shape, x1, y1, s)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return (min(xs), min(ys), max(xs), max(ys))


def _overlap_fraction(a, b):
    """Intersection over the smaller box's area."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    small = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return iw * ih / small


def make_scene(rng, size=None, n_objects=None):
    """A random scene. size: (w, h) or None for a random one; n_objects: 0..4 or None."""
    w, h = size or random_size(rng)
    img = background(rng, w, h)
    d = ImageDraw.Draw(img)
    n = rng.choice((0, 1, 1, 2, 2, 3, 3, 4)) if n_objects is None else n_objects
    objects = []
    short = min(w, h)
    for _ in range(n):
        for _attempt in range(30):
            s = rng.uniform(MIN_SIZE, MAX_SIZE) * short
            x1, y1 = rng.uniform(0, w - s), rng.uniform(0, h - s)
            shape = rng.choice(SHAPES)
            box = tight_box(shape, x1, y1, s)
            colour = rng.choice(list(COLOURS))
            # Overlap sometimes, but never so much that a shape is hidden, and never two
            # shapes of one colour (they would melt into one blob).
            if all(_overlap_fraction(box, o.box) < (0.25 if o.colour != colour else 1e-9) for o in objects):
                break
        else:
            continue
        fill = _jitter(COLOURS[colour], rng, 20)
        if shape == "circle":
            d.ellipse([x1, y1, x1 + s, y1 + s], fill=fill)
        else:
            d.polygon(shape_polygon(shape, x1, y1, s), fill=fill)
        objects.append(Obj(shape, colour, box))
    return Scene(img, objects)


# ---------------------------------------------------------------------------------------
# Queries and answers
# ---------------------------------------------------------------------------------------


def matches(obj, category):
    """category is "red circle", "circle", "red shape" or "shape"."""
    colour, _, shape = category.rpartition(" ")
    return (shape in ("shape", obj.shape)) and (colour in ("", obj.colour))


def random_category(rng, scene, present_prob=0.75):
    """A category, present in the scene with probability present_prob when possible."""
    forms = ("{c} {s}", "{c} {s}", "{s}", "{c} shape")
    if scene.objects and rng.random() < present_prob:
        o = rng.choice(scene.objects)
        c, s = o.colour, o.shape
    else:
        c, s = rng.choice(list(COLOURS)), rng.choice(SHAPES)
    return rng.choice(forms).format(c=c, s=s)


def norm(v, size, step=1):
    """A pixel coordinate as LocateAnything's 0..1000 integer, rounded to a multiple of step."""
    return max(0, min(1000, step * round(v / size * 1000 / step)))


def box_tokens(obj, w, h, step=1):
    x1, y1, x2, y2 = obj.box
    return f"<box><{norm(x1, w, step)}><{norm(y1, h, step)}><{norm(x2, w, step)}><{norm(y2, h, step)}></box>"


def point_tokens(obj, w, h, step=1):
    cx, cy = obj.centre
    return f"<box><{norm(cx, w, step)}><{norm(cy, h, step)}></box>"


NONE_ANSWER = "<box>None</box>"


def in_reading_order(objs):
    """Left to right by the box's left edge (ties: top to bottom)."""
    return sorted(objs, key=lambda o: (o.box[0], o.box[1]))


def detect_answer(scene, categories, step=1):
    w, h = scene.size
    out = []
    for cat in categories:
        found = in_reading_order([o for o in scene.objects if matches(o, cat)])
        out.append(f"<ref>{cat}</ref>" + ("".join(box_tokens(o, w, h, step) for o in found) or NONE_ANSWER))
    return "".join(out)


def point_answer(scene, category, step=1):
    w, h = scene.size
    found = in_reading_order([o for o in scene.objects if matches(o, category)])
    return f"<ref>{category}</ref>" + ("".join(point_tokens(o, w, h, step) for o in found) or NONE_ANSWER)


def plural_phrase(rng, category):
    """A phrase for every instance of a category, for the "ground" task: "blue circle" becomes
    "blue circles", "all the blue circles" or "every blue circle"."""
    form = rng.randrange(3)
    if form == 2:
        return f"every {category}"
    plural = category + "s"
    return plural if form == 0 else f"all the {plural}"


def phrase_category(phrase):
    """The category a plural_phrase was made from."""
    if phrase.startswith("every "):
        return phrase[len("every "):]
    return phrase.removeprefix("all the ")[:-1]


def superlative_target(scene, word, category):
    """The one object the phrase "the {word} {category}" means, None when no object
    matches, or False when the phrase is ambiguous (two candidates too close to call)."""
    cands = [o for o in scene.objects if matches(o, category)]
    if not cands:
        return None
    key = {
        "largest": lambda o: -o.area,
        "smallest": lambda o: o.area,
        "leftmost": lambda o: o.centre[0],
        "rightmost": lambda o: -o.centre[0],
    }[word]
    cands.sort(key=key)
    if len(cands) > 1:
        a, b = key(cands[0]), key(cands[1])
        margin = abs(b - a) / (max(abs(a), abs(b)) if word in ("largest", "smallest") else scene.size[0])
        if margin < 0.15:
            return False
    return cands[0]


def make_query(rng, scene, task=None, step=1, present_prob=0.75):
    """(task, query, answer text) for a scene; task None picks one at random. Coordinates in
    the answer are rounded to multiples of step; present_prob is the chance that a queried
    category is in the scene (when the scene has objects)."""
    if task is None:
        task = rng.choices(("detect", "ground", "ground_one", "point"), weights=(5, 1, 2, 2))[0]
    w, h = scene.size
    if task == "detect":
        n = 1 if rng.random() < 0.75 else 2
        cats = []
        while len(cats) < n:
            c = random_category(rng, scene, present_prob)
            if c not in cats:
                cats.append(c)
        return task, "</c>".join(cats), detect_answer(scene, cats, step)
    if task == "ground":
        cat = random_category(rng, scene, present_prob)
        phrase = plural_phrase(rng, cat)
        return task, phrase, detect_answer(scene, [cat], step).replace(f"<ref>{cat}</ref>", f"<ref>{phrase}</ref>", 1)
    if task == "point":
        cat = random_category(rng, scene, present_prob)
        return task, cat, point_answer(scene, cat, step)
    if task == "ground_one":
        for _ in range(20):
            word, cat = rng.choice(SUPERLATIVES), random_category(rng, scene, max(0.85, present_prob))
            target = superlative_target(scene, word, cat)
            if target is not False:
                break
        else:
            return make_query(rng, scene, "detect", step, present_prob)
        phrase = f"the {word} {cat}"
        return task, phrase, f"<ref>{phrase}</ref>" + (NONE_ANSWER if target is None else box_tokens(target, w, h, step))
    raise ValueError(f"unknown task {task}")


def instruction(task, query):
    return TEMPLATES[task].format(query)


def chat_prompt(instruction_text, n_image_tokens):
    """The chat string engine/prompt builds (docs/background.md, "Chat prompt")."""
    return ("<|im_start|>system\nYou are a helpful assistant.\n<|im_end|>\n"
            "<|im_start|>user\n<image 1><img>" + "<IMG_CONTEXT>" * n_image_tokens + "</img>"
            + instruction_text + "<|im_end|>\n<|im_start|>assistant\n")


def all_categories():
    cats = [f"{c} {s}" for c in COLOURS for s in SHAPES] + list(SHAPES) + [f"{c} shape" for c in COLOURS]
    return cats
