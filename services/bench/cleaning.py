"""`hifi bench cleaning`: how much each cleaning stage fixes, scored against the emulator's ground
truth. No broker and no Spark: the stages' pure operators (the ones the DSP and the reference
evaluator run) over emulated readings, so the figures are about cleaning, not transport.

1. Presence per tag and epoch (edge.presence: tags with known read rates, static or entering and
   leaving range, and the mixed setting): raw reads, fixed windows, adaptive smoothing
   (base.smurf). Errors per tag-epoch; the best fixed window is chosen in hindsight per setting.
2. The supply-chain scenario (readers with two antennas, overlapping dock doors, ghost reads, a
   degrading reader), run offline: where arbitration puts each tag per epoch against where it is,
   and the per-location counts the core would report against the true counts.
3. Tag counts with confidence (services.bench.tag_estimates): the π-estimate and its interval
   beside the plain count of tags read, at known read rates and at the scenario's locations.
4. Faulty motes (base.mote_quality) on the real Intel Lab replay with injected faults: precision
   and recall per mote-period.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from base.mote_quality import MoteQuality
from base.smurf import ReaderSmoother, smooth_adaptive, smooth_fixed
from edge.agent import ReceptorAgent
from edge.intel_lab import INTEL_LAB_DATA, load_intel_lab, plan_faults, replay
from edge.presence import TagTrace, answered_cycles, mixed_traces, moving_traces, static_traces
from edge.scenario import load_scenario
from edge.truth import presence_errors, read_cycles
from services.bench.report import figures_table
from services.bench.tag_estimates import tag_estimate_lines, tag_estimate_scores

FIXED_WINDOWS = (1, 2, 3, 5, 8, 12, 20)   # epochs; 1 is the raw reads
READ_RATES = (0.5, 0.6, 0.7, 0.8, 0.9)
CYCLES = 5                                # read cycles per one-second epoch (200 ms cycles)
STRENGTH_THRESHOLDS = (0.2, 0.45)         # overlap reads kept; the default topology's strength_T, which drops most


@dataclass(frozen=True)
class PresenceRow:
    setting: str
    errors: dict[str, tuple[float, float]]   # method -> (false negatives, false positives) per tag-epoch
    oracle: float                            # errors per tag-epoch with each tag's best window in hindsight

    def total(self, method: str) -> float:
        return sum(self.errors[method])

    @property
    def best_fixed(self) -> str:
        return min((m for m in self.errors if m.startswith("fixed")), key=self.total)

    @property
    def ratio(self) -> float:
        return self.total("adaptive") / max(self.total(self.best_fixed), 1e-9)


def presence_settings(tags: int, epochs: int, seed: int) -> list[tuple[str, list[TagTrace]]]:
    settings = [("mixed", mixed_traces(2 * tags, epochs, seed))]
    settings += [(f"static {rate:.0%}", static_traces(tags, epochs, rate)) for rate in READ_RATES]
    settings += [(f"moving {rate:.0%}", moving_traces(tags, epochs, rate, dwell=20, seed=seed)) for rate in READ_RATES]
    return settings


def score_presence(setting: str, traces: list[TagTrace], seed: int) -> PresenceRow:
    rng = random.Random(seed)
    answered = [answered_cycles(t, CYCLES, rng) for t in traces]
    truth = [t.present for t in traces]
    reported = {f"fixed {w}": [smooth_fixed(a, w) for a in answered] for w in FIXED_WINDOWS}
    reported["adaptive"] = smooth_adaptive(answered)
    errors = {}
    for name, said in reported.items():
        fn, fp, epochs = presence_errors(truth, said)
        errors[name] = (fn / epochs, fp / epochs)
    per_tag_best = sum(min(sum(presence_errors([present], [smooth_fixed(a, w)])[:2]) for w in range(1, 31))
                       for present, a in zip(truth, answered, strict=True))
    return PresenceRow(setting, errors, per_tag_best / sum(len(p) for p in truth))


# ---------------------------------------------------------------- the supply chain, offline

def _epochs_of(cycles: list[dict], epoch_ms: int, strength_t: float):
    """Per epoch: reads per (receptor, tag) that pass the strength threshold, and where each tag
    truly was (the location it was present at in most of the epoch's read cycles)."""
    reads: dict[int, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    seen_at: dict[int, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    locations: dict[str, str] = {}
    for cycle in cycles:
        epoch = cycle["t"] // epoch_ms
        locations[cycle["receptor"]] = cycle["location"]
        for tag, _antenna, strength in cycle["reads"]:
            if strength >= strength_t:
                reads[epoch][(cycle["receptor"], tag)] += 1
        for tag in cycle["present"]:
            seen_at[epoch][tag][cycle["location"]] += 1
    truth = {epoch: {tag: max(places, key=lambda p: (places[p], p)) for tag, places in tags.items()}
             for epoch, tags in seen_at.items()}
    return reads, truth, locations


def _assign(reads, locations, presence: Callable[[int, dict[tuple[str, str], int]], dict[tuple[str, str], float]]):
    """Per epoch, each tag at one location: of the receptors that report it present, the one that
    reads it most (per epoch of its window: windows differ in length under adaptive smoothing;
    ties: the smallest receptor id) — the paper's arbitration."""
    assigned: dict[int, dict[str, str]] = {}
    for epoch in sorted(reads):
        best: dict[str, tuple[int, str]] = {}
        for (receptor, tag), weight in presence(epoch, reads[epoch]).items():
            best[tag] = min(best.get(tag, (-weight, receptor)), (-weight, receptor))
        assigned[epoch] = {tag: locations[receptor] for tag, (_, receptor) in best.items()}
    return assigned


def _fixed_presence(reads, window: int):
    def presence(epoch: int, _now) -> dict[tuple[str, str], int]:
        totals: dict[tuple[str, str], int] = defaultdict(int)
        for e in range(epoch - window + 1, epoch + 1):
            for key, n in reads.get(e, {}).items():
                totals[key] += n
        return totals
    return presence


def _adaptive_presence(reads):
    smoothers: dict[str, ReaderSmoother] = defaultdict(ReaderSmoother)
    receptors = sorted({receptor for epoch in reads.values() for receptor, _ in epoch})
    last = [min(reads) - 1] if reads else [0]

    def presence(epoch: int, _now) -> dict[tuple[str, str], float]:
        present = {}
        for e in range(last[0] + 1, epoch + 1):   # every epoch, the empty ones too
            by_receptor: dict[str, dict[str, int]] = defaultdict(dict)
            for (receptor, tag), n in reads.get(e, {}).items():
                by_receptor[receptor][tag] = n
            for receptor in receptors:
                for tag, n, window in smoothers[receptor].step(by_receptor[receptor]):
                    present[(receptor, tag)] = n / window   # reads per epoch
        last[0] = epoch
        return present
    return presence


def score_locations(cycles: list[dict], epoch_ms: int, strength_t: float) -> dict[str, tuple[float, float, float]]:
    """method -> (location accuracy, count error per location-epoch, share of exact counts)."""
    reads, truth, locations = _epochs_of(cycles, epoch_ms, strength_t)
    read_locations = set(locations.values())
    methods = {f"fixed {w}": _fixed_presence(reads, w) for w in (1, 2, 3, 5)}
    methods["adaptive"] = _adaptive_presence(reads)
    scores = {}
    for name, presence in methods.items():
        assigned = _assign(reads, locations, presence)
        right = total = count_error = exact = cells = 0
        for epoch, where in truth.items():
            said = assigned.get(epoch, {})
            true_here = {tag: loc for tag, loc in where.items() if loc in read_locations}
            tags = set(true_here) | set(said)
            right += sum(true_here.get(tag) == said.get(tag) for tag in tags)
            total += len(tags)
            for location in read_locations:
                n_true = sum(loc == location for loc in true_here.values())
                n_said = sum(loc == location for loc in said.values())
                count_error += abs(n_true - n_said)
                exact += n_true == n_said
                cells += 1
        scores[name] = (right / max(total, 1), count_error / max(cells, 1), exact / max(cells, 1))
    return scores


def supply_chain_cycles(scenario_file: str, duration_s: float, seed: int | None) -> list[dict]:
    scenario = load_scenario(scenario_file, 0, seed)
    return list(read_cycles(ReceptorAgent(scenario, bootstrap="").offline_readings(duration_s)))


# ---------------------------------------------------------------- motes

def mote_detection(seed: int, share: float = 0.2) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of faulty-mote detection per mote-period
    on the Intel Lab replay with faults injected on `share` of the motes."""
    lab = load_intel_lab(INTEL_LAB_DATA)
    faults = {f.mote_id: f for f in plan_faults(lab, seed, share)}
    periods: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
    for sample in replay(lab, list(faults.values()), 0, 1.0, seed):
        periods[sample.step][f"m{sample.mote_id}"] = sample.values
    quality = MoteQuality({f"m{m.mote_id}": (m.x, m.y) for m in lab})
    tp = fp = fn = 0
    for step in range(min(m.steps for m in lab)):
        for verdict in quality.step(step, periods[step]):
            fault = faults.get(int(verdict.receptor_id[1:]))
            truly = fault is not None and fault.start_step <= step < fault.end_step
            tp += verdict.faulty and truly
            fp += verdict.faulty and not truly
            fn += truly and not verdict.faulty
    return tp, fp, fn


# ---------------------------------------------------------------- the command

def presence_figures(rows: list[PresenceRow]) -> list[dict]:
    """Per setting: the best fixed window's errors per tag-epoch, and adaptive's and the oracle's."""
    return [{"setting": r.setting, "best_fixed": r.best_fixed, "best_fixed_errors": r.total(r.best_fixed),
             "adaptive_errors": r.total("adaptive"), "oracle_errors": r.oracle} for r in rows]


def run_cleaning_bench(scenario_file: str, duration_s: float, seed: int, plot: str | None,
                       progress: Callable[[str], None]) -> tuple[str, list[dict]]:
    """The report's text, and the presence figures per setting (presence_figures)."""
    progress("presence: static, moving and mixed tags")
    rows = [score_presence(name, traces, seed) for name, traces in presence_settings(100, 600, seed)]
    lines = ["Presence per tag-epoch (1 s epochs of 5 read cycles; rate = chance a present tag is read in "
             "an epoch; errors = false negatives + false positives)", ""]
    header = (f"{'setting':<12}" + "".join(f"{m:>10}" for m in rows[0].errors)
              + f"{'best fixed':>12}{'adaptive/best':>15}{'oracle/best':>13}")
    lines += [header, "-" * len(header)]
    for row in rows:
        lines.append(f"{row.setting:<12}" + "".join(f"{row.total(m):>10.4f}" for m in row.errors)
                     + f"{row.best_fixed:>12}{row.ratio:>15.2f}"
                     + f"{row.oracle / max(row.total(row.best_fixed), 1e-9):>13.2f}")
    mixed = rows[0]
    fn, fp = mixed.errors["adaptive"]
    lines += ["", f"mixed, adaptive: {fn:.4f} false negatives + {fp:.4f} false positives per tag-epoch",
              "oracle: every tag with its own best fixed window, chosen in hindsight (what no per-tag window "
              "can beat)", ""]

    progress(f"supply chain: {scenario_file}, {duration_s:.0f} s offline")
    cycles = supply_chain_cycles(scenario_file, duration_s, seed)
    lines += [f"Arbitration and counts ({os.path.basename(scenario_file)}, {duration_s:.0f} s; 1 s epochs; "
              "counts per location and epoch)", ""]
    header = (f"{'strength >=':<13}{'smoothing':<12}{'location accuracy':>20}{'count error/cell':>18}"
              f"{'exact counts':>14}")
    lines += [header, "-" * len(header)]
    for strength_t in STRENGTH_THRESHOLDS:
        for name, (accuracy, error, exact) in score_locations(cycles, 1000, strength_t).items():
            lines.append(f"{strength_t:<13}{name:<12}{accuracy:>20.3f}{error:>18.3f}{exact:>14.1%}")

    progress("tag counts: the π-estimate and its interval")
    lines += ["", "Tag counts: tag_estimate() against the tags truly there, beside the count of tags read "
              "(mean absolute errors per window)", "", *tag_estimate_lines(tag_estimate_scores(cycles, seed))]

    progress("faulty motes: Intel Lab replay")
    motes = []
    for mote_seed in (seed, seed + 1, seed + 2):
        tp, fp, fn = mote_detection(mote_seed)
        motes.append((f"faulty motes, seed {mote_seed}",
                      f"precision {tp / max(tp + fp, 1):.3f}, recall {tp / max(tp + fn, 1):.3f} "
                      f"({tp} found, {fp} false, {fn} missed)"))
    lines += ["", figures_table(motes)]
    if plot:
        try:
            _plot(rows, plot)
            lines += ["", f"plot: {plot}"]
        except ModuleNotFoundError:   # plotting is the optional extra `plot`
            lines += ["", "no plot: matplotlib is not installed (pip install '.[plot]'; make installs it)"]
    return "\n".join(lines), presence_figures(rows)


def _plot(rows: list[PresenceRow], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.27
    bars: list[tuple[str, Callable[[PresenceRow], str]]] = [
        ("raw reads", lambda r: "fixed 1"), ("best fixed window", lambda r: r.best_fixed),
        ("adaptive", lambda r: "adaptive")]
    for i, (label, pick) in enumerate(bars):
        ax.bar([x + (i - 1) * width for x in range(len(rows))], [r.total(pick(r)) for r in rows], width, label=label)
    ax.set_xticks(range(len(rows)), [r.setting for r in rows], rotation=30)
    ax.set_ylabel("errors per tag-epoch")
    ax.set_yscale("log")
    ax.set_title("RFID presence: raw reads, best fixed window (in hindsight), adaptive smoothing")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
