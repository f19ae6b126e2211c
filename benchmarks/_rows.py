"""One JSON line per benchmark run: printed and appended to the results file."""
import json
import tempfile
import time
from pathlib import Path
from typing import NamedTuple


def emit(row: dict, path) -> None:
    """Print ``row``; append it to ``path`` too unless that is None."""
    print(json.dumps(row), flush=True)
    if path is None:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def replace_block(path, begin: str, end: str, text: str) -> None:
    """Replace what stands between the markers ``begin`` and ``end`` in the file ``path`` (a generated table of
    RESULTS.md) with ``text``; a file without both markers is refused, naming them."""
    path = Path(path)
    doc = path.read_text()
    if begin not in doc or end not in doc:
        raise SystemExit(f"{path} has no {begin} ... {end} markers: add them where the table goes")
    head, rest = doc.split(begin, 1)
    path.write_text(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


def add_set_option(parser) -> None:
    """``--set KEY=JSON ...``: any other constructor argument of the method."""
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=JSON",
                        help="any other constructor argument, taken by every --method given (each method lists "
                             "its own: param_names()), e.g. n_product=50 for dp-hp, beta1=0.5 for dp-mepf")


def set_overrides(parser, items) -> dict:
    """The ``--set`` pairs as a dict (values parsed as JSON)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes KEY=JSON pairs; got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            parser.error(f"--set {key}: the value must be JSON, a text in double quotes ({key}='\"{value}\"'); "
                         f"got {value!r}")
    return out


def check_taken(parser, classes: dict, params: dict, *, every: bool, what: str = "--set") -> None:
    """Refuse, before the first run, a parameter that the chosen methods (``{name: class}``) do not take
    (``param_names()`` is the truth; a method's constructor lists only its own options): with ``every``, one
    that any of them does not take (``--set``: given to every run); without it, one that none of them takes (a
    flag named for some methods, applied to those only: :func:`taken`)."""
    for key in params:
        missing = [name for name, cls in classes.items() if key not in cls.param_names()]
        if missing and (every or len(missing) == len(classes)):
            parser.error(f"{what}: {', '.join(missing)} take{'s' if len(missing) == 1 else ''} no {key!r} "
                         f"(see each method's param_names())")


def taken(cls, params: dict) -> dict:
    """The parameters of ``params`` that ``cls`` takes."""
    names = set(cls.param_names())
    return {k: v for k, v in params.items() if k in names}


def add_stops_option(parser) -> None:
    parser.add_argument("--stops", nargs="+", type=int, default=None,
                        help="generator methods: train ONE release to each of these iteration counts in turn (resumed "
                             "from the checkpoint, no privacy spent again) and write synthetic rows at each stop, "
                             "named ..._it{K}; the fit time is the time to that stop")


class Stage(NamedTuple):
    """One stop of :func:`staged_fits`: the iteration count (None: a plain fit), the fitted model, the fit seconds
    so far, the parameters the stop added, and the suffix its output files carry (``_it{K}``, or none)."""
    stop: int | None
    model: object
    fit_s: float
    params: dict
    suffix: str


def staged_fits(make, fit, stops):
    """A :class:`Stage` for each of ``stops`` (increasing iteration counts; ``None``: one plain fit):
    ``make(params)`` builds the method with ``params`` added, ``fit(model, out, resume)`` fits it. The first
    stop releases into a temporary folder; later ones resume there (the release and the training state reused, no
    privacy spent again), so stop K is exactly the first K iterations of the longest run."""
    stops = stops or [None]
    if stops != [None] and sorted(set(stops)) != list(stops):
        raise SystemExit(f"--stops must increase: {stops}")
    with tempfile.TemporaryDirectory() as folder:
        spent = 0.0
        for k in stops:
            staged = {} if k is None else {"iterations": k}
            t = time.perf_counter()
            model = fit(make(staged), None if k is None else folder, k not in (None, stops[0]))
            spent += time.perf_counter() - t
            yield Stage(k, model, spent, staged, "" if k is None else f"_it{k}")
